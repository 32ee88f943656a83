"""``python -m noisycal_platform.confirm_app --home H [--host 127.0.0.1] [--port 8765]``: same as
``noisycal serve-confirmations``."""

from __future__ import annotations

import argparse
from pathlib import Path

from noisycal_platform.confirm_app import DEFAULT_HOST, DEFAULT_PORT, HOST_HELP, serve


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m noisycal_platform.confirm_app")
    p.add_argument("--home", type=Path, required=True, help="the $NOISYCAL_HOME folder")
    p.add_argument("--host", default=DEFAULT_HOST, help=HOST_HELP)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = p.parse_args(argv)
    serve(args.home, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
