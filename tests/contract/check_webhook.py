#!/usr/bin/env python3
"""Checks webhook request bodies (our test fixtures) against LINE's webhook schema.

usage: check_webhook.py SHARED_DIR FILE.json...

Reuses the discriminator-following checker of SHARED_DIR/tools/line_contract.py
(imported from there, not copied), pointed at SHARED_DIR/line-openapi/webhook.yml.
Exits 1 when any body has a problem.
"""
import json
import os
import sys

import yaml


def main():
    shared, files = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, os.path.join(shared, "tools"))
    import line_contract

    with open(os.path.join(shared, "line-openapi", "webhook.yml")) as spec:
        line_contract._schemas = yaml.safe_load(spec)["components"]["schemas"]
    problems = []
    for path in files:
        with open(path) as body:
            found = []
            line_contract.check(json.load(body), {"$ref": "#/components/schemas/CallbackRequest"},
                                os.path.basename(path), found)
            problems.extend(found)
    print("\n".join(problems))
    print(f"{len(files)} webhook bodies, {len(problems)} schema problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
