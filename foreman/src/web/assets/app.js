// Saheeli dashboard. Every text that comes from a task (titles, questions,
// tool arguments, audit lines) is put in the page with textContent, never
// as HTML: a prompt containing <script> shows as text.
"use strict";

const STATES = ["queued", "starting", "running", "waiting_human", "paused", "blocked",
  "complete", "incomplete", "failed", "cancelled"];

// el("div", {class: "x"}, "text", child): children that are strings
// become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(method, path, body) {
  const opts = { method, headers: { "Accept": "application/json" } };
  if (method !== "GET") {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body || {});
  }
  const res = await fetch(path, opts);
  if (res.status === 401) {
    location.href = "/login";
    throw new Error("log in first");
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new Error(data && data.error ? data.error.message : res.statusText);
  return data;
}

// Formatting.
function badge(state) {
  return el("span", { class: "badge s-" + state, "data-state": state }, state.replace("_", " "));
}
function short(id) { return id.replace(/-/g, "").slice(-12); }
function ago(iso) {
  if (!iso) return "";
  return span(Math.max(0, (Date.now() - Date.parse(iso)) / 1000));
}
function span(s) {
  if (s === null || s === undefined) return "";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + Math.floor(s % 86400 / 3600) + "h";
}
function tokens(n) {
  if (!n) return "0";
  if (n < 1000) return String(n);
  if (n < 1e6) return (n / 1000).toFixed(n < 1e4 ? 1 : 0) + "k";
  return (n / 1e6).toFixed(2) + "M";
}
function cost(usd) { return usd ? "$" + usd.toFixed(usd < 1 ? 4 : 2) : "—"; }
function clock(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : d.toTimeString().slice(0, 8);
}
function waits(w) {
  if (!w) return "";
  if (w.kind === "answer") return "asks: " + w.question;
  if (w.kind === "approval") return "approve " + w.tool + " " + String(w.arguments || "").slice(0, 120);
  if (w.kind === "plan") return "approve plan (" + (w.plan || []).length + " steps)";
  if (w.kind === "blocked") return "blocked: " + w.reason + " (needs: " + w.needed + ")";
  if (w.kind === "egress") return "the " + w.phase + " phase wants " + w.host + ":" + w.port;
  return w.kind;
}

// Live indicator and throttled refreshes.
function liveState(on) {
  const l = document.getElementById("live");
  l.className = "live " + (on ? "on" : "off");
  l.textContent = on ? "live" : "reconnecting…";
}
function throttle(fn, ms) {
  let timer = null, again = false;
  return function run() {
    if (timer) { again = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (again) { again = false; run(); } }, ms);
  };
}

function counts(tasks) {
  const nav = document.getElementById("counts");
  const by = {};
  for (const t of tasks) by[t.state] = (by[t.state] || 0) + 1;
  nav.replaceChildren(...STATES.filter(s => by[s]).map(s =>
    el("span", { class: "count" }, el("b", {}, by[s]), " " + s.replace("_", " "))));
}

// The serving foreman's pool: `pool: N warm idle` in the header.
async function foremanLine() {
  const span = document.getElementById("foreman");
  if (!span) return;
  try {
    const f = await api("GET", "/api/foreman");
    const parts = f.pool_idle === null ? [] : ["pool: " + f.pool_idle + " warm idle"];
    // `pools:` (issue 52): running/max per pool, and what waits for it.
    for (const p of f.pools || [])
      parts.push(p.pool + " " + p.running + "/" + p.max + (p.queued ? " (" + p.queued + " queued)" : ""));
    // Definitions from Git (issue 52): the commit in use, and a rejected one.
    const d = f.definitions;
    if (d) {
      parts.push("definitions: " + (d.commit ? d.commit.slice(0, 12) : "none applied"));
      if (d.rejected && d.rejected.pending)
        parts.push("rejected " + d.rejected.commit.slice(0, 12) + ": " + d.rejected.reason);
    }
    span.textContent = parts.join(" · ");
    span.title = f.line || "no foreman serving";
  } catch (e) { span.textContent = ""; }
}

// ---- The task list ------------------------------------------------------
function listView(main) {
  let filter = new URLSearchParams(location.search).get("state") || "";
  let search = "";
  const select = el("select", { id: "state-filter", "aria-label": "state",
    onchange: () => { filter = select.value; refresh(); } },
    el("option", { value: "" }, "all states"),
    STATES.map(s => el("option", { value: s, selected: s === filter }, s.replace("_", " "))));
  const find = el("input", { id: "search", type: "search", placeholder: "filter by title or id",
    oninput: () => { search = find.value.toLowerCase(); render(last); } });
  const body = el("tbody", { id: "task-rows" });
  const table = el("table", { class: "tasks", id: "tasks" },
    el("thead", {}, el("tr", {},
      ["State", "Title", "Waiting for", "Age", "Duration", "Steps", "Tokens", "Cost", "Id"]
        .map((h, i) => el("th", { class: i >= 3 && i <= 7 ? "num" : null }, h)))),
    body);
  const prompt = el("textarea", { id: "new-prompt", rows: 6,
    placeholder: "---\ntitle: Fix the failing test\nmodel: gpt-4o-mini\n---\nThe test … fails. Find out why and fix it." });
  const flash = el("div", { class: "flash" });
  const submit = el("button", { class: "primary", id: "new-submit", onclick: async () => {
    submit.disabled = true;
    try {
      const r = await api("POST", "/api/tasks", { prompt: prompt.value });
      location.href = "/tasks/" + r.id;
    } catch (e) { flash.className = "flash err"; flash.textContent = e.message; }
    submit.disabled = false;
  } }, "Submit");
  main.replaceChildren(
    el("div", { class: "toolbar" }, select, find, el("span", { class: "grow" }),
      el("span", { class: "muted", id: "shown" })),
    el("details", { class: "new" }, el("summary", {}, "New task"),
      el("div", { class: "body" }, prompt, el("div", { class: "row" }, submit, flash))),
    table);

  let last = [];
  function render(tasks) {
    last = tasks;
    const shown = tasks.filter(t => !search || t.title.toLowerCase().includes(search) || t.id.includes(search));
    document.getElementById("shown").textContent = shown.length + " of " + tasks.length + " tasks";
    if (!shown.length) {
      body.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 9 },
        tasks.length ? "No task matches." : "No tasks yet. Submit one with `saheeli task submit --prompt FILE` or above.")));
      return;
    }
    body.replaceChildren(...shown.map(t => el("tr", { "data-id": t.id, onclick: (ev) => {
      if (ev.target.tagName !== "A") location.href = "/tasks/" + t.id;
    } },
      el("td", {}, badge(t.state)),
      el("td", { class: "title" }, el("a", { href: "/tasks/" + t.id, class: "task-title" }, t.title)),
      el("td", { class: "waits" }, t.state === "paused" ? "paused" : waits(t.waiting_for),
        t.frozen ? el("span", { class: "frozen", title: "its servo is frozen while it waits (suspend_after) since " + clock(t.frozen_at) }, "❄ frozen") : null),
      el("td", { class: "num" }, ago(t.created_at)),
      el("td", { class: "num" }, t.duration_s === null ? "" : span(t.duration_s)),
      el("td", { class: "num" }, t.steps),
      el("td", { class: "num" }, tokens(t.tokens)),
      el("td", { class: "num" }, cost(t.cost_usd)),
      el("td", { class: "mono muted" }, short(t.id)))));
  }
  const refresh = throttle(async () => {
    try {
      const q = filter ? "?state=" + encodeURIComponent(filter) + "&limit=500" : "?limit=500";
      const tasks = await api("GET", "/api/tasks" + q);
      render(tasks);
      if (!filter) counts(tasks);
      foremanLine();
    } catch (e) { liveState(false); }
  }, 700);
  refresh();
  const es = new EventSource("/api/events");
  es.onopen = () => liveState(true);
  es.onerror = () => liveState(false);
  es.addEventListener("task", refresh);
  setInterval(refresh, 5000);
}

// ---- One task -----------------------------------------------------------
function taskView(main, id) {
  const title = el("h1", { id: "title" }, "…");
  const state = el("span", { id: "state" });
  const facts = el("div", { class: "facts", id: "facts" });
  const waiting = el("section", { class: "card waiting", id: "waiting", hidden: true });
  const stepsCard = el("section", { class: "card", id: "steps", hidden: true });
  const childrenCard = el("section", { class: "card", id: "children", hidden: true });
  const egressCard = el("section", { class: "card", id: "egress", hidden: true });
  const flash = el("div", { class: "flash", id: "flash" });
  const timeline = el("ol", { class: "timeline", id: "timeline" });
  const audit = el("div", { class: "audit", id: "audit", role: "log", "aria-live": "polite" });
  const results = el("section", { class: "card", id: "results", hidden: true });
  const injectText = el("input", { id: "inject-text", placeholder: "a hint the model reads before its next call" });
  const buttons = {
    pause: el("button", { id: "pause", onclick: () => act("pause") }, "Pause"),
    resume: el("button", { id: "resume", onclick: () => act("resume") }, "Resume"),
    cancel: el("button", { id: "cancel", class: "danger", onclick: () => {
      if (confirm("Cancel this task?")) act("cancel");
    } }, "Cancel"),
    retry: el("button", { id: "retry", onclick: async () => {
      const r = await act("retry");
      if (r && r.id) location.href = "/tasks/" + r.id;
    } }, "Retry"),
    inject: el("button", { id: "inject", onclick: async () => {
      if (await act("inject", { text: injectText.value })) injectText.value = "";
    } }, "Inject"),
  };
  main.replaceChildren(el("div", { class: "task" },
    el("div", { class: "crumbs" }, el("a", { href: "/" }, "← All tasks")),
    el("div", { class: "head" }, state, title, el("span", { class: "mono muted" }, id)),
    facts,
    waiting,
    stepsCard,
    childrenCard,
    egressCard,
    el("section", { class: "card" }, el("h2", {}, "Control"),
      el("div", { class: "controls" }, buttons.pause, buttons.resume, buttons.cancel, buttons.retry,
        el("span", { class: "grow" }), injectText, buttons.inject),
      flash),
    el("div", { class: "cols" },
      el("section", { class: "card" }, el("h2", {}, "Timeline"), timeline),
      el("section", { class: "card" }, el("h2", {}, "Audit trail"), audit)),
    results));

  async function act(action, body) {
    flash.className = "flash";
    flash.textContent = "…";
    try {
      const r = await api("POST", "/api/tasks/" + id + "/" + action, body);
      flash.textContent = r.message;
      if (r.task && r.task.id === task?.id) show(r.task);
      return r;
    } catch (e) {
      flash.className = "flash err";
      flash.textContent = e.message;
      return null;
    }
  }

  let task = null;
  let shownWaiting = "";
  function fact(k, v, wide) {
    return el("div", { class: wide ? "fact wide" : "fact" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  }
  function show(t) {
    task = t;
    document.title = t.title + " · Saheeli";
    title.textContent = t.title;
    state.replaceChildren(badge(t.state));
    const ended = ["complete", "incomplete", "failed", "cancelled"].includes(t.state);
    facts.replaceChildren(...[
      fact("model", t.model),
      fact("steps", t.steps),
      fact("tokens", tokens(t.tokens) + " (" + tokens(t.input_tokens) + " in, " + tokens(t.output_tokens) + " out)"),
      t.cache_read_tokens + t.cache_write_tokens > 0
        ? fact("prompt cache", tokens(t.cache_read_tokens) + " read (" + Math.round(t.cache_hit_rate * 100) + "% of input), " + tokens(t.cache_write_tokens) + " written")
        : null,
      t.compactions > 0 ? fact("compactions", t.compactions) : null,
      fact("cost", cost(t.cost_usd)),
      fact("age", ago(t.created_at)),
      fact("duration", t.duration_s === null ? "—" : span(t.duration_s)),
      t.deadline ? fact("deadline", clock(t.deadline) + (ended ? "" : Date.parse(t.deadline) > Date.now()
        ? " (in " + span((Date.parse(t.deadline) - Date.now()) / 1000) + ")" : " (passed)")) : null,
      t.priority ? fact("priority", t.priority) : null,
      fact("attempt", t.attempt),
      t.setup ? fact("setup", (t.setup.key === undefined ? "ran (cache off)"
        : (t.setup.hit ? "cache hit" : "ran, cache miss") + " " + t.setup.key.slice(0, 12)
          + (t.setup.maintenance ? ", maintenance ran" : ""))
        + ", " + span(t.setup.ms / 1000)) : null,
      // Issue 52: the commit it started from, the branch it delivered.
      t.git ? fact("repository", t.git.url + " @ " + t.git.ref + ", " + t.git.commit.slice(0, 12), true) : null,
      t.follow_up_of ? fact("follows up", el("a", { href: "/tasks/" + t.follow_up_of }, t.follow_up_of.slice(-12))) : null,
      t.delivery ? fact("branch", el("span", { id: "delivery", class: "mono" }, t.delivery.branch
        + (t.delivery.commit ? " " + t.delivery.commit.slice(0, 12) : "")
        + (t.delivery.pushed ? " (pushed)" : " (not pushed" + (t.delivery.error ? ": " + t.delivery.error : "") + ")")), true) : null,
      fact("reason", t.reason || "—"),
      t.recoverable === null || t.recoverable === undefined ? null
        : fact("recoverable", t.recoverable ? "yes" : "no"),
      t.waiting_since ? fact("waiting since", clock(t.waiting_since)) : null,
      // Issue 51: the servo frozen while it waits (no CPU, no slot).
      t.frozen ? fact("servo", el("span", { id: "frozen", class: "frozen" },
        "❄ frozen since " + clock(t.frozen_at) + ": no CPU until the answer thaws it"), true) : null,
      t.parent ? fact("parent", el("a", { href: "/tasks/" + t.parent, id: "parent-link" }, t.parent.slice(-12))) : null,
      t.forked_from ? fact("fork of", el("span", {},
        el("a", { href: "/tasks/" + t.forked_from.task, id: "fork-link" }, t.forked_from.task.slice(-12)),
        " at step " + t.forked_from.at_step + " (" + t.forked_from.index + " of " + t.forked_from.count + ")")) : null,
      t.detail ? fact("detail", t.detail, true) : null,
      t.override ? fact("override", t.override.to + " by " + t.override.by + ": " + t.override.reason, true) : null,
    ].filter(Boolean));
    buttons.pause.disabled = ended || ["paused", "waiting_human", "blocked"].includes(t.state);
    buttons.resume.disabled = !(t.state === "paused" || t.state === "blocked" || t.pause_requested);
    buttons.cancel.disabled = ended;
    buttons.retry.disabled = !ended;
    buttons.inject.disabled = ended;
    injectText.disabled = ended;
    showWaiting(t);
    showSteps(t, ended);
    showChildren(t);
    showEgress(t);
    if (ended && results.hidden) showResults(t);
  }

  // A template's steps: n/m done, each with its mark, evidence, duration,
  // override and breakpoints; the controls of issue 29 beside them.
  let shownSteps = "";
  function showSteps(t, ended) {
    const steps = t.template_steps || [];
    const key = JSON.stringify([steps, t.state]);
    if (key === shownSteps) return;
    shownSteps = key;
    stepsCard.hidden = steps.length === 0;
    if (!steps.length) { stepsCard.replaceChildren(); return; }
    const MARK = { completed: "✓", in_progress: "◐", pending: "○", skipped: "⊘" };
    const closed = steps.filter(s => s.state === "completed" || s.state === "skipped").length;
    const took = (s) => s.started_at && s.at
      ? span((Date.parse(s.at) - Date.parse(s.started_at)) / 1000) : "";
    const toggle = (s, pos) => {
      const on = (s.breakpoints || []).includes(pos);
      return el("button", { class: on ? "bp on" : "bp", "data-step": s.name, "data-pos": pos,
        disabled: ended, title: (on ? "clear the breakpoint " : "pause ") + pos + " this step",
        onclick: () => act("breakpoint", { step: s.name, position: pos, clear: on }) },
        (on ? "● " : "○ ") + pos);
    };
    const override = (s, to) => el("button", { class: "ov", "data-step": s.name, "data-to": to,
      disabled: ended || s.state === "skipped" || (to === "done" && s.state === "completed"),
      onclick: () => {
        const reason = prompt("Why is step " + s.name + " " + to + "?");
        if (reason && reason.trim()) act("step-override", { step: s.name, state: to, reason });
      } }, to === "done" ? "Mark done" : "Skip");
    const rows = steps.map(s => el("li", { class: "step s-" + s.state + (s.state === "in_progress" ? " current" : ""),
      "data-step": s.name },
      el("span", { class: "mark" }, MARK[s.state] || "?"),
      el("div", { class: "body" },
        el("div", { class: "name" }, s.name, s.approve ? el("span", { class: "tag" }, "approval") : null,
          el("span", { class: "muted" }, " " + s.state.replace("_", " "))),
        s.description ? el("div", { class: "muted" }, s.description) : null,
        s.evidence ? el("div", { class: "evidence" }, "evidence: " + s.evidence)
          : s.done_when ? el("div", { class: "muted" }, "done when: " + (typeof s.done_when === "string"
            ? s.done_when : s.done_when.verify + " passes (checked)")) : null,
        s.override ? el("div", { class: "override" },
          s.override.state + " by " + s.override.by + ": " + s.override.reason) : null),
      el("span", { class: "num muted" }, took(s)),
      el("span", { class: "controls" }, toggle(s, "before"), toggle(s, "after"),
        override(s, "skipped"), override(s, "done"))));
    const stepBtn = el("button", { id: "step-once", disabled: ended || !["paused", "running", "queued", "starting"].includes(t.state),
      onclick: () => act("step") }, "Step ▸");
    // What a paused task does next, before anyone steps or resumes it.
    const next = steps.find(s => s.state === "in_progress");
    const upNext = t.state === "paused" && next ? el("div", { id: "next-step", class: "muted" },
      "next: " + next.name + (next.description ? " — " + next.description : "")
        + (next.done_when ? "; done when " + (typeof next.done_when === "string"
          ? next.done_when : next.done_when.verify + " passes") : "")
        + (next.approve && !next.started_at ? "; needs approval" : "")
        + ((next.breakpoints || []).length ? "; pauses " + next.breakpoints.join(" and ") : "")) : null;
    stepsCard.replaceChildren(
      el("div", { class: "row" }, el("h2", { id: "steps-count" }, "Steps " + closed + "/" + steps.length),
        el("span", { class: "grow" }), stepBtn),
      upNext,
      el("ol", { class: "steps" }, rows));
  }

  // Parent and child tasks (issue 30): each child with its state (one
  // waiting for a person stands out) and the tree's totals.
  let shownChildren = "";
  function showChildren(t) {
    const kids = t.children || [];
    const key = JSON.stringify([kids, t.tree]);
    if (key === shownChildren) return;
    shownChildren = key;
    childrenCard.hidden = kids.length === 0;
    if (!kids.length) { childrenCard.replaceChildren(); return; }
    const rows = kids.map(c => el("tr", { class: "child", "data-child": c.id },
      el("td", {}, el("a", { href: "/tasks/" + c.id, class: "mono" }, c.id.slice(-12))),
      el("td", {}, badge(c.state)),
      el("td", {}, c.title),
      el("td", { class: "num" }, tokens(c.tokens)),
      el("td", { class: "num" }, cost(c.cost_usd))));
    const tree = t.tree;
    childrenCard.replaceChildren(
      el("h2", { id: "children-count" }, "Children " + kids.length),
      tree ? el("div", { class: "muted" }, tree.tasks + " tasks in this tree, " + tokens(tree.tokens)
        + " tokens, " + cost(tree.cost_usd)) : null,
      el("table", { class: "children" }, el("tbody", {}, rows)));
  }

  // Egress (issue 50): every connection its proxies were asked for.
  let shownEgress = "";
  function showEgress(t) {
    const list = t.egress || null;
    const key = JSON.stringify(list);
    if (key === shownEgress) return;
    shownEgress = key;
    egressCard.hidden = !list;
    if (!list) { egressCard.replaceChildren(); return; }
    const refused = list.filter(e => e.verdict === "refused").length;
    const rows = list.slice(-200).map(e => el("tr", { class: "egress v-" + e.verdict },
      el("td", {}, e.phase),
      el("td", { class: "mono" }, e.host + ":" + e.port),
      el("td", {}, e.verdict),
      el("td", { class: "num" }, String(e.bytes_up)),
      el("td", { class: "num" }, String(e.bytes_down)),
      el("td", { class: "muted" }, e.reason || "")));
    egressCard.replaceChildren(
      el("h2", { id: "egress-count" }, "Egress " + list.length + (refused ? " (" + refused + " refused)" : "")),
      list.length ? el("table", { class: "egress" },
        el("thead", {}, el("tr", {}, ...["phase", "host", "verdict", "sent", "received", "why"].map(h => el("th", {}, h)))),
        el("tbody", {}, rows)) : el("div", { class: "muted" }, "no connection asked for"));
  }

  function showWaiting(t) {
    const w = t.state === "waiting_human" || t.state === "blocked" ? t.waiting_for : null;
    const key = JSON.stringify(w);
    if (key === shownWaiting) return;
    shownWaiting = key;
    waiting.hidden = !w;
    if (!w) { waiting.replaceChildren(); return; }
    if (w.kind === "answer" || w.kind === "blocked") {
      const text = el("textarea", { id: "answer-text", rows: 3,
        placeholder: w.kind === "blocked" ? "what unblocks it" : "your answer" });
      const send = el("button", { class: "primary", id: "answer-send", onclick: async () => {
        if (!text.value.trim()) { text.focus(); return; }
        send.disabled = true;
        await act("answer", { text: text.value });
        send.disabled = false;
      } }, "Send answer");
      const asked = w.kind === "blocked"
        ? el("p", { class: "question", id: "question" }, w.reason, el("br"), "Needs: " + w.needed)
        : el("p", { class: "question", id: "question" }, w.question);
      waiting.replaceChildren(el("h2", {}, w.kind === "blocked" ? "The agent is blocked" : "The agent asks"),
        asked, text,
        el("div", { class: "row", style: null }, send));
      return;
    }
    const note = el("input", { id: "decision-text", placeholder: w.kind === "plan"
      ? "feedback (required to reject: the agent replans with it)" : "note or reason (a reason is required to deny)" });
    const approve = el("button", { class: "primary", id: "approve", onclick: () =>
      act("approve", note.value.trim() ? { note: note.value } : {}) }, w.kind === "plan" ? "Approve plan" : "Approve");
    const deny = el("button", { class: "danger", id: "deny", onclick: () => {
      if (!note.value.trim()) { note.focus(); flash.textContent = "say why in the box first"; return; }
      act("deny", { reason: note.value });
    } }, w.kind === "plan" ? "Reject plan" : "Deny");
    const what = w.kind === "plan"
      ? el("ol", { class: "plan", id: "plan" }, (w.plan || []).map(s => el("li", {}, s)))
      : w.kind === "egress"
        ? el("p", { class: "question", id: "question" }, "The " + w.phase + " phase wants ",
          el("code", {}, w.host + ":" + w.port), ". Approve it for the rest of the task?")
        : el("div", {}, el("p", { class: "question" }, "Run ", el("code", {}, w.tool), "?"),
          t.approval ? el("p", { id: "approval-asked" }, t.approval) : null,
          el("pre", { class: "args", id: "arguments" }, w.arguments));
    waiting.replaceChildren(el("h2", {}, w.kind === "plan" ? "Review the plan"
      : w.kind === "egress" ? "Egress approval needed" : "Approval needed"),
      what, el("div", { class: "row" }, note, approve, deny));
  }

  async function showResults(t) {
    results.hidden = false;
    const links = el("div", { class: "controls" },
      el("a", { href: "/api/tasks/" + id + "/report", target: "_blank", rel: "noopener", id: "report-link" }, "report.md"),
      el("a", { href: "/api/tasks/" + id + "/patch", target: "_blank", rel: "noopener", id: "patch-link" }, "changes.patch"),
      t.results ? el("span", { class: "muted mono" }, t.results) : null);
    const list = el("ul", { class: "files", id: "files" });
    results.replaceChildren(el("h2", {}, "Results"), links, list);
    if (!t.results) { list.replaceChildren(el("li", { class: "muted" }, "nothing was collected")); return; }
    try {
      const r = await api("GET", "/api/tasks/" + id + "/files");
      list.replaceChildren(...r.entries.filter(e => e.kind !== "dir").map(e => el("li", {},
        e.kind === "file"
          ? el("a", { href: "/api/tasks/" + id + "/files/" + e.path.split("/").map(encodeURIComponent).join("/"),
              target: "_blank", rel: "noopener" }, e.path)
          : el("span", { class: "muted" }, e.path + " (" + e.kind + ", not followed)"),
        e.kind === "file" ? el("span", { class: "muted" }, " " + e.size + " B") : null)));
      if (r.truncated) list.append(el("li", { class: "muted" }, "… (listing cut)"));
    } catch (e) { list.replaceChildren(el("li", { class: "muted" }, e.message)); }
  }

  function addEvent(e) {
    const what = e.kind ? e.kind.replace("_", " ") + (e.by ? " by " + e.by : "")
      : (e.from ? e.from.replace("_", " ") + " → " : "") + e.to.replace("_", " ");
    timeline.append(el("li", { class: "ev" }, el("span", { class: "t" }, clock(e.at)),
      el("div", {}, el("div", { class: "what" }, what, e.reason ? " (" + e.reason + ")" : ""),
        e.detail ? el("div", { class: "detail" }, e.detail) : null)));
    timeline.scrollTop = timeline.scrollHeight;
  }
  function addLine(l) {
    const stick = audit.scrollHeight - audit.scrollTop - audit.clientHeight < 40;
    const last = audit.lastElementChild;
    if (l.kind === "llm.delta") {
      // The model's text as it streams in (live only): one growing line.
      if (l.delta != null && last && last.classList.contains("live-text")) last.textContent += l.delta;
      else audit.append(el("div", { class: "line live" + (l.delta != null ? " live-text" : "") }, l.text));
    } else audit.append(el("div", { class: "line" + (l.kind ? " k-" + l.kind : "") }, l.text));
    if (stick) audit.scrollTop = audit.scrollHeight;
  }

  const reload = throttle(async () => {
    try { show(await api("GET", "/api/tasks/" + id)); }
    catch (e) { flash.className = "flash err"; flash.textContent = e.message; }
  }, 400);
  reload();
  const es = new EventSource("/api/tasks/" + id + "/events");
  es.onopen = () => liveState(true);
  es.onerror = () => liveState(false);
  es.addEventListener("task", m => { addEvent(JSON.parse(m.data)); reload(); });
  es.addEventListener("audit", m => addLine(JSON.parse(m.data)));
  es.addEventListener("end", () => {
    es.close();
    const l = document.getElementById("live");
    l.className = "live";
    l.textContent = "ended";
    reload();
  });
  setInterval(() => { if (task && !["complete", "incomplete", "failed", "cancelled"].includes(task.state)) reload(); }, 5000);
}

function start() {
  const main = document.getElementById("main");
  const m = location.pathname.match(/^\/tasks\/([0-9a-fA-F-]+)$/);
  if (m) taskView(main, m[1]); else listView(main);
  // Absent when the server has no token (nothing to log out of).
  const logout = document.getElementById("logout");
  if (logout) logout.addEventListener("click", async () => {
    await fetch("/logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    location.href = "/login";
  });
}
start();
