"""The official Python SDKs (anthropic, openai) as a third-party agent's
client: they call a task's gateway socket (over a unix-socket transport)
and parse its answers, whole and streamed, the way the agents' CLIs do.

usage: check_gateway.py SOCKET SCENARIO FIRST_MARKER
Prints one JSON object: what each call returned, as the SDK parsed it.
The fake provider answers a call whose message holds NATIVE-<k> with its
k-th scripted reply; FIRST_MARKER is the first k this script may use.
"""

import json
import sys

import anthropic
import httpx2 as httpx
import openai

PLACEHOLDER = "sk-placeholder-from-the-container"


def http(sock):
    return httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=60)


def marker(k):
    return [{"role": "user", "content": f"NATIVE-{k}"}]


def messages(sock, k):
    c = anthropic.Anthropic(api_key=PLACEHOLDER, base_url="http://127.0.0.1:9",
                            http_client=http(sock), max_retries=0)
    tools = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]
    out = {}
    with c.messages.stream(model="claude-test", max_tokens=1000, messages=marker(k),
                           tools=tools) as s:
        m = s.get_final_message()
    out["stream"] = {"stop_reason": m.stop_reason,
                     "blocks": [b.model_dump() for b in m.content],
                     "usage": m.usage.model_dump()}
    m = c.messages.create(model="claude-test", max_tokens=1000, messages=marker(k + 1))
    out["whole"] = {"blocks": [b.model_dump() for b in m.content], "usage": m.usage.model_dump()}
    n = c.messages.count_tokens(model="claude-test", messages=marker(k + 2))
    out["count_tokens"] = n.input_tokens
    return out


def messages_budget(sock, k):
    c = anthropic.Anthropic(api_key=PLACEHOLDER, base_url="http://127.0.0.1:9",
                            http_client=http(sock), max_retries=0)
    try:
        with c.messages.stream(model="claude-test", max_tokens=1000,
                               messages=marker(k)) as s:
            s.get_final_message()
        return {"raised": None}
    except anthropic.APIStatusError as e:
        return {"raised": type(e).__name__, "body": e.body}
    except anthropic.APIError as e:
        return {"raised": type(e).__name__, "body": e.body}


def openai_apis(sock, k):
    c = openai.OpenAI(api_key=PLACEHOLDER, base_url="http://127.0.0.1:9/v1",
                      http_client=http(sock), max_retries=0)
    tools = [{"type": "function",
              "function": {"name": "exec_command", "parameters": {"type": "object"}}}]
    out = {}
    args, usage = "", None
    for chunk in c.chat.completions.create(model="gpt-test", messages=marker(k), tools=tools,
                                           stream=True):
        if chunk.usage:
            usage = chunk.usage.model_dump()
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                args += tc.function.arguments or ""
    out["chat_stream"] = {"arguments": json.loads(args), "usage": usage}
    rtools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    with c.responses.stream(model="gpt-test", input=marker(k + 1), tools=rtools) as s:
        r = s.get_final_response()
    calls = [o for o in r.output if o.type == "function_call"]
    out["responses_stream"] = {"arguments": json.loads(calls[0].arguments),
                               "usage": r.usage.model_dump()}
    r = c.responses.create(model="gpt-test", input=marker(k + 2))
    out["responses_whole"] = {"text": r.output_text, "usage": r.usage.model_dump()}
    return out


def main():
    sock, scenario, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run = {"messages": messages, "messages_budget": messages_budget,
           "openai": openai_apis}[scenario]
    print(json.dumps(run(sock, k)))


if __name__ == "__main__":
    main()
