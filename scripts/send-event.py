#!/usr/bin/env python3
"""Posts one signed webhook event to a locally running service, as LINE would.

usage:
  scripts/send-event.py text "survey"            a text message
  scripts/send-event.py follow                    a follow (friend added)
  scripts/send-event.py postback 'v=1&k=a&...'    a postback (button or card tap)
  scripts/send-event.py postback 'v=1&k=d&...' date=2027-03-14
                                                  a date picker's answer: the
                                                  picked value in postback.params
                                                  (date=, time=HH:MM or
                                                  datetime=YYYY-MM-DDTHH:MM)
  scripts/send-event.py unfollow                  an unfollow (blocked)

Environment: SERVICE_URL (default http://127.0.0.1:8080), LINE_CHANNEL_SECRET
(default local-channel-secret, as scripts/run-local.sh uses), LINE_USER_ID
(default a fixed test user). Prints the HTTP status the service answered.
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.request
import uuid


PICKED = ("date", "time", "datetime")


def picked(extra):
    """`date=...`, `time=...` or `datetime=...` as LINE's postback.params."""
    params = {}
    for item in extra:
        name, _, value = item.partition("=")
        if name not in PICKED or not value:
            sys.exit(f"{item!r} is not date=..., time=... or datetime=...\n\n{__doc__}")
        params[name] = value
    return params


def event(kind, argument, extra=()):
    common = {
        "webhookEventId": uuid.uuid4().hex[:26].upper(),
        "deliveryContext": {"isRedelivery": False},
        "timestamp": int(time.time() * 1000),
        "source": {"type": "user", "userId": os.environ.get("LINE_USER_ID", "U" + "0" * 31 + "1")},
        "replyToken": uuid.uuid4().hex,
        "mode": "active",
    }
    if kind == "text":
        return {**common, "type": "message",
                "message": {"type": "text", "id": str(uuid.uuid4().int >> 70), "quoteToken": "q", "text": argument}}
    if kind == "follow":
        return {**common, "type": "follow", "follow": {"isUnblocked": False}}
    if kind == "unfollow":
        return {key: value for key, value in {**common, "type": "unfollow"}.items() if key != "replyToken"}
    if kind == "postback":
        postback = {"data": argument}
        params = picked(extra)
        if params:
            postback["params"] = params
        return {**common, "type": "postback", "postback": postback}
    sys.exit(__doc__)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    kind, argument = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    body = json.dumps({"destination": "U" + "d" * 32, "events": [event(kind, argument, sys.argv[3:])]}).encode()
    secret = os.environ.get("LINE_CHANNEL_SECRET", "local-channel-secret").encode()
    signature = base64.b64encode(hmac.new(secret, body, hashlib.sha256).digest()).decode()
    url = os.environ.get("SERVICE_URL", "http://127.0.0.1:8080") + "/webhook"
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "X-Line-Signature": signature})
    try:
        with urllib.request.urlopen(request) as response:
            print(response.status)
    except urllib.error.HTTPError as error:
        print(error.code, error.read().decode())


if __name__ == "__main__":
    main()
