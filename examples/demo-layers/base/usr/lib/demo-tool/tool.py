#!/usr/bin/env python3
"""demo-tool: print the state of the demo service (the `demo-tool` alternative)."""
from __future__ import annotations

import argparse
import json
import sys
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8080/status"


def colour(text: str, code: str) -> str:
    return f"\033[{code}m{text}\033[0m"


def fetch(url: str, timeout: float) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo-tool")
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    try:
        status = fetch(args.url, args.timeout)
    except OSError as exc:
        print(colour(f"unreachable: {exc}", "31"), file=sys.stderr)
        return 1
    for key in sorted(status):
        print(f"{colour(key, '1')}: {status[key]}")
    return 0 if status.get("ready") else 3


if __name__ == "__main__":
    sys.exit(main())
