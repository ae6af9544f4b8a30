#!/usr/bin/env python3
"""Posts one signed webhook event to a locally running service, as LINE would.

usage:
  scripts/send-event.py text "survey"            a text message
  scripts/send-event.py follow                    a follow (friend added)
  scripts/send-event.py postback 'v=1&k=a&...'    a postback (button or card tap)

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


def event(kind, argument):
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
    if kind == "postback":
        return {**common, "type": "postback", "postback": {"data": argument}}
    sys.exit(__doc__)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    kind, argument = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    body = json.dumps({"destination": "U" + "d" * 32, "events": [event(kind, argument)]}).encode()
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
