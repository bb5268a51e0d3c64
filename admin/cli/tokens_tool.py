"""The work of ``magnetar tokens`` (see :mod:`.cmd_tokens` for the commands and their flags)."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from magnetar.bookkeeper.runtime import SystemClock
from magnetar.bookkeeper.runtime.auth.errors import KeyConfigError, TokenError
from magnetar.bookkeeper.runtime.auth.keys import (
    create_key_pair,
    create_secret_key,
    private_key,
    public_key,
    read_key_setting,
    secret_key,
    write_key_file,
)
from magnetar.bookkeeper.runtime.auth.tokens import TokenVerifier, create_token, parse_relative_time_s

TOKEN_INPUT_BYTES_MAX = 64 * 1024


class ToolError(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def run(args: argparse.Namespace) -> int:
    command = args.tokens_command
    try:
        if command == "create-secret-key":
            return _create_secret_key(args)
        if command == "create-key-pair":
            return _create_key_pair(args)
        if command == "create":
            return _create(args)
        if command == "show":
            return _show(args)
        return _validate(args)
    except KeyConfigError as exc:
        raise ToolError(str(exc)) from None
    except BrokenPipeError:
        raise  # stdout closed by the reader (`| head`): the command line ends quietly
    except OSError as exc:
        raise ToolError(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None


def _create_secret_key(args: argparse.Namespace) -> int:
    key = create_secret_key(args.signature_algorithm)
    data = base64.b64encode(key) if args.base64 else key
    if args.output:
        write_key_file(Path(args.output), data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


def _create_key_pair(args: argparse.Namespace) -> int:
    private, public = create_key_pair(args.signature_algorithm, args.format)
    write_key_file(Path(args.output_private_key), private)
    write_key_file(Path(args.output_public_key), public)
    return 0


def _create(args: argparse.Namespace) -> int:
    if args.secret_key is not None:
        key = secret_key(read_key_setting(args.secret_key, "--secret-key"), "--secret-key")
    else:
        key = private_key(read_key_setting(args.private_key, "--private-key"), "--private-key")
    expires_at_s = None
    if args.expiry_time is not None:
        try:
            expires_at_s = int(time.time()) + parse_relative_time_s(args.expiry_time)
        except ValueError as exc:
            raise ToolError(f"--expiry-time: {exc}", 2) from None
    print(create_token(key, args.subject, expires_at_s=expires_at_s, algorithm=args.signature_algorithm))
    return 0


def _read_token(args: argparse.Namespace) -> str:
    if args.token is not None:
        token = args.token
    elif args.stdin:
        token = sys.stdin.readline(TOKEN_INPUT_BYTES_MAX)
    elif args.token_file is not None:
        with open(args.token_file, encoding="ascii", errors="replace") as handle:
            token = handle.read(TOKEN_INPUT_BYTES_MAX)
    elif os.environ.get("TOKEN"):
        token = os.environ["TOKEN"]
    else:
        raise ToolError("pass the token as an argument, with --stdin, --token-file or in $TOKEN", 2)
    return str(token).strip()


def _decode_part(part: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise ToolError(f"not a JWT: {exc}") from None


def _show(args: argparse.Namespace) -> int:
    parts = _read_token(args).split(".")
    if len(parts) != 3:
        raise ToolError("not a JWT: expected three parts separated by '.'")
    print(json.dumps(_decode_part(parts[0])))
    print("---")
    print(json.dumps(_decode_part(parts[1])))
    return 0


def _validate(args: argparse.Namespace) -> int:
    token = _read_token(args)
    if args.secret_key is not None:
        key = secret_key(read_key_setting(args.secret_key, "--secret-key"), "--secret-key")
    else:
        key = public_key(read_key_setting(args.public_key, "--public-key"), "--public-key")
    try:
        verified = TokenVerifier(key, clock=SystemClock()).verify(token)
    except TokenError as exc:
        raise ToolError(f"invalid token: {exc.reason}") from None
    print(json.dumps(dict(verified.claims), sort_keys=True))
    return 0
