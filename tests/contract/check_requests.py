#!/usr/bin/env python3
"""Checks the rich menu request bodies a LINE stand-in recorded against LINE's
Messaging API schema.

usage: check_requests.py SHARED_DIR CALLS.json
  CALLS.json: a JSON list of {"method": "POST", "path": "/v2/bot/richmenu/...",
  "body": {...}}, as LineStandIn::rich_menu_calls_for_contract writes it.

Each POST body is checked against the schema of its path (RichMenuRequest,
CreateRichMenuAliasRequest, UpdateRichMenuAliasRequest, RichMenuBulkLinkRequest,
RichMenuBulkUnlinkRequest, RichMenuBatchRequest) with the discriminator-following
checker of SHARED_DIR/tools/line_contract.py (imported from there, not copied),
pointed at SHARED_DIR/line-openapi/messaging-api.yml, plus the schema's string
`pattern`s, which that checker leaves out. Calls to other paths are skipped.
Prints each problem and a count; exits 1 when there is any problem.
"""
import json
import os
import re
import sys

import yaml

SCHEMAS = [
    (r"/v2/bot/richmenu", "RichMenuRequest"),
    (r"/v2/bot/richmenu/validate", "RichMenuRequest"),
    (r"/v2/bot/richmenu/alias", "CreateRichMenuAliasRequest"),
    (r"/v2/bot/richmenu/alias/[^/]+", "UpdateRichMenuAliasRequest"),
    (r"/v2/bot/richmenu/bulk/link", "RichMenuBulkLinkRequest"),
    (r"/v2/bot/richmenu/bulk/unlink", "RichMenuBulkUnlinkRequest"),
    (r"/v2/bot/richmenu/batch", "RichMenuBatchRequest"),
    (r"/v2/bot/richmenu/validate/batch", "RichMenuBatchRequest"),
]


def schema_for(path):
    for pattern, name in SCHEMAS:
        if re.fullmatch(pattern, path or ""):
            return name
    return None


def check_patterns(line_contract, value, schema, path, out, follow_discriminator=True):
    """The `pattern` of every string the schema constrains, following
    discriminators, allOf, properties and items as line_contract.check does."""
    s = line_contract.resolve(schema)
    disc = s.get("discriminator")
    if follow_discriminator and disc and isinstance(value, dict):
        target = disc.get("mapping", {}).get(value.get(disc["propertyName"]))
        if target is not None:
            check_patterns(line_contract, value, {"$ref": target}, path, out, follow_discriminator=False)
        return
    for part in s.get("allOf", []):
        check_patterns(line_contract, value, part, path, out, follow_discriminator=False)
    if isinstance(value, str) and "pattern" in s and not re.search(s["pattern"], value):
        out.append(f"{path}: {value!r} does not match {s['pattern']}")
    if isinstance(value, list) and "items" in s:
        for i, item in enumerate(value):
            check_patterns(line_contract, item, s["items"], f"{path}[{i}]", out)
    if isinstance(value, dict):
        for key, sub in (s.get("properties") or {}).items():
            if value.get(key) is not None:
                check_patterns(line_contract, value[key], sub, f"{path}.{key}", out)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    shared, calls_file = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(shared, "tools"))
    import line_contract

    with open(os.path.join(shared, "line-openapi", "messaging-api.yml")) as spec:
        line_contract._schemas = yaml.safe_load(spec)["components"]["schemas"]
    with open(calls_file) as calls:
        calls = json.load(calls)
    problems, checked = [], 0
    for i, call in enumerate(calls):
        name = schema_for(call.get("path"))
        if call.get("method") != "POST" or name is None:
            continue
        checked += 1
        where = f"call {i} {call['path']} ({name})"
        schema = {"$ref": f"#/components/schemas/{name}"}
        found = []
        line_contract.check(call.get("body"), schema, where, found)
        check_patterns(line_contract, call.get("body"), schema, where, found)
        problems.extend(found)
    print("\n".join(problems))
    print(f"{checked} request bodies, {len(problems)} schema problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
