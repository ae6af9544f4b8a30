#!/usr/bin/env python3
"""Warms a freshly started Firestore emulator up.

A cold emulator (a cold JVM) is slow for its first thousand or so operations;
tests and benchmarks that start on a cold one measure the JIT, not the service.
This runs creates, gets and a query in a throwaway project over REST.

usage: warm_emulator.py HOST:PORT [OPERATIONS]
"""
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def main():
    host = sys.argv[1]
    operations = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    base = f"http://{host}/v1/projects/warm-up/databases/(default)/documents"
    headers = {"Content-Type": "application/json", "Authorization": "Bearer owner"}

    def call(method, url, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as error:
            if error.code != 409:  # ALREADY_EXISTS is part of the warm-up
                raise

    def one(i):
        doc = {"fields": {"n": {"integerValue": str(i)}, "tags": {"arrayValue": {"values": [{"stringValue": "t"}]}}}}
        call("POST", f"{base}/warm?documentId=d{i % 500}", doc)
        call("GET", f"{base}/warm/d{i % 500}")

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, range(operations // 2)))
    query = {"structuredQuery": {"from": [{"collectionId": "warm"}],
                                 "where": {"fieldFilter": {"field": {"fieldPath": "n"}, "op": "EQUAL",
                                                           "value": {"integerValue": "1"}}}, "limit": 1}}
    call("POST", base + ":runQuery", query)
    call("DELETE", f"http://{host}/emulator/v1/projects/warm-up/databases/(default)/documents")
    print(f"emulator warmed up with {operations} operations in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
