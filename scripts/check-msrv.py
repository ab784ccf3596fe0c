#!/usr/bin/env python3
"""Fails when a locked dependency declares a `rust-version` above the workspace's own.

The workspace promises its `rust-version` (Cargo.toml); a dependency that needs a newer compiler
breaks that promise for users on the older one, silently, because this machine's toolchain is
newer. `cargo update -p <crate> --precise <version>` picks a version that fits.
"""
import json
import subprocess
import sys


def version(text):
    """`1.88` and `1.88.0` as the same comparable triple."""
    parts = [int(part) for part in text.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    members = set(meta["workspace_members"])
    ours = {p["rust_version"] for p in meta["packages"] if p["id"] in members and p.get("rust_version")}
    if len(ours) != 1:
        sys.exit(f"check-msrv: expected one workspace rust-version, found {sorted(ours) or 'none'}")
    msrv = ours.pop()
    used = {node["id"] for node in meta["resolve"]["nodes"]}
    too_new = sorted(
        f'{p["name"]} {p["version"]} needs Rust {p["rust_version"]}'
        for p in meta["packages"]
        if p["id"] in used
        and p["id"] not in members
        and p.get("rust_version")
        and version(p["rust_version"]) > version(msrv)
    )
    if too_new:
        sys.exit(f"check-msrv: the workspace promises Rust {msrv}, but\n  " + "\n  ".join(too_new))
    print(f"check-msrv: every locked dependency builds with Rust {msrv}")


if __name__ == "__main__":
    main()
