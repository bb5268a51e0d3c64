"""``magnetar tokens``: keys and tokens for token authentication, like ``pulsar tokens``.

* ``create-secret-key [-a HS256] [-o FILE] [-b]`` - a random HMAC key: raw bytes (``--base64`` for text),
  to ``--output`` (mode 0600) or stdout. Use it as ``token_secret_key=file:///path`` or ``data:;base64,...``.
* ``create-key-pair [-a RS256|ES256|...] --output-private-key F --output-public-key F [--format der|pem]`` -
  a PKCS#8 private key and an X.509 public key (DER as Pulsar writes them, or PEM).
* ``create -s ROLE [-e 1h] (-sk KEY | -pk KEY) [-a ALG]`` - a token for ROLE, printed on stdout. ``KEY`` is a
  key setting (``file:///path``, ``data:;base64,...`` or base64); ``--expiry-time`` is relative (``30s``,
  ``10m``, ``1h``, ``3d``, ``2w``, ``1y``); without it the token never expires.
* ``show [TOKEN | -i | -f FILE]`` - the header and claims, unverified.
* ``validate [TOKEN | -i | -f FILE] (-sk KEY | -pk KEY)`` - verify; print the claims, or why not (exit 1).

A token not given as an argument, ``--stdin`` or ``--token-file`` is read from the ``TOKEN`` environment
variable, as Pulsar does.
"""

from __future__ import annotations

import argparse
import sys

EXIT_FAILED = 1
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tokens_command", metavar="COMMAND", required=True)
    secret = sub.add_parser("create-secret-key", help="create a new secret key")
    secret.add_argument("-a", "--signature-algorithm", default="HS256", choices=["HS256", "HS384", "HS512"])
    secret.add_argument("-o", "--output", help="write the key to this file instead of stdout")
    secret.add_argument("-b", "--base64", action="store_true", help="encode the key in base64")

    pair = sub.add_parser("create-key-pair", help="create a new private/public key pair")
    pair.add_argument(
        "-a",
        "--signature-algorithm",
        default="RS256",
        choices=["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"],
    )
    pair.add_argument("--output-private-key", required=True, help="file for the private key")
    pair.add_argument("--output-public-key", required=True, help="file for the public key")
    pair.add_argument("--format", default="der", choices=["der", "pem"], help="key encoding (default der)")

    create = sub.add_parser("create", help="create a new token")
    create.add_argument("-s", "--subject", required=True, help="the role (principal) the token names")
    create.add_argument(
        "-e", "--expiry-time", help="relative expiry time (30s, 10m, 1h, 3d, 1y); default never"
    )
    create.add_argument("-a", "--signature-algorithm", help="default: the strongest the key allows")
    signing = create.add_mutually_exclusive_group(required=True)
    signing.add_argument("-sk", "--secret-key", help="secret key: file:///path, data:;base64,... or base64")
    signing.add_argument("-pk", "--private-key", help="private key: file:///path, data:;base64,... or base64")

    show = sub.add_parser("show", help="show the header and claims of a token (not verified)")
    _token_source(show)

    validate = sub.add_parser("validate", help="validate a token against a key")
    _token_source(validate)
    checking = validate.add_mutually_exclusive_group(required=True)
    checking.add_argument("-sk", "--secret-key", help="secret key: file:///path, data:;base64,... or base64")
    checking.add_argument("-pk", "--public-key", help="public key: file:///path, data:;base64,... or base64")


def _token_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", nargs="?", help="the token (else --stdin, --token-file or $TOKEN)")
    parser.add_argument("-i", "--stdin", action="store_true", help="read the token from standard input")
    parser.add_argument("-f", "--token-file", help="read the token from a file")


def run(args: argparse.Namespace) -> int:
    from magnetar.admin.cli import tokens_tool  # noqa: PLC0415 (crypto imports only when the command runs)

    try:
        return tokens_tool.run(args)
    except tokens_tool.ToolError as exc:
        print(f"magnetar tokens: {exc}", file=sys.stderr)
        return exc.exit_code
