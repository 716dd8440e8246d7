"""A real SMTP server (aiosmtpd, pinned in the venv `scripts/setup.sh sdk`
makes) for the email channel's test: listens on 127.0.0.1:PORT and writes
each message it accepts, as received, to DIR/<n>.eml with its envelope in
DIR/<n>.json. Prints "ready" once it listens."""

import json
import os
import sys
import time

from aiosmtpd.controller import Controller


class Save:
    def __init__(self, out):
        self.out = out
        self.n = 0

    async def handle_DATA(self, server, session, envelope):
        self.n += 1
        base = os.path.join(self.out, str(self.n))
        with open(base + ".json.part", "w") as f:
            json.dump({"from": envelope.mail_from, "to": envelope.rcpt_tos}, f)
        with open(base + ".eml", "wb") as f:
            f.write(envelope.original_content)
        os.rename(base + ".json.part", base + ".json")
        return "250 OK"


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    c = Controller(Save(out), hostname="127.0.0.1", port=port)
    c.start()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        c.stop()


if __name__ == "__main__":
    main()
