#!/usr/bin/python3
"""A deliberately broken "library" for the harness's own test: it answers
every acquire at once with ACQUIRED (no lock at all) and tokens that go
down, and every release with RELEASED. The harness must fail every
scenario that relies on exclusion or fencing with it
(conformance_harness_catches_a_broken_library)."""
import json
import sys

token = 1000
print(json.dumps({"event": "ready", "lang": "broken"}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd.get("cmd") == "quit":
        break
    if cmd.get("cmd") == "acquire":
        token -= 1
        print(json.dumps({"hold": cmd["hold"], "event": "acquired", "token": token,
                          "lease_id": "x"}), flush=True)
    elif cmd.get("cmd") == "release":
        print(json.dumps({"hold": cmd["hold"], "event": "released"}), flush=True)
    elif "req" in cmd:
        print(json.dumps({"req": cmd["req"], "error": "UNIMPLEMENTED"}), flush=True)
