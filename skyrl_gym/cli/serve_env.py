"""``skyrl-gym serve-env``: serve registered envs over HTTP (sessions: create, init, step, close).

    skyrl-gym serve-env                                   # every registered env, on 127.0.0.1:8010
    skyrl-gym serve-env --port 0 --envs gsm8k,text2sql    # a free port (printed), two envs only
    skyrl-gym serve-env --import my_envs                  # also the envs that my_envs registers when imported
    SKYRL_GYM_ENV_SERVICE_TOKEN=... skyrl-gym serve-env --host 0.0.0.0   # beyond loopback: a token is required
    skyrl-gym serve-env --env-config server.json          # the operator's settings (sandbox, judge, data)

The operator's settings (``--env-config``, JSON ``{"*": {...}, "<env id>": {...}}``) hold everything that
touches this host: sandbox backend and isolation, judge endpoint, data folders, services, and the ceilings of
timeouts and limits. A client's ``env_config`` may set only the keys docs/security.md lists for its env,
within those bounds.

Clients: ``skyrl_gym.make("remote", url="http://127.0.0.1:8010", env_id="gsm8k", extras=row)``. The protocol is
described in :mod:`skyrl_gym.remote`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, List, Optional, Tuple

from skygym_sandboxes.listening import check_can_listen, port_number


def register(subparsers: Any) -> None:
    from skyrl_gym.remote import TOKEN_ENV
    from skyrl_gym.remote.server import (
        CLIENT_TIMEOUT_S,
        DEFAULT_BUILD_THREADS,
        DEFAULT_ENV_THREADS,
        DEFAULT_IDLE_TIMEOUT_S,
        DEFAULT_MAX_SESSIONS,
        MAX_BODY_BYTES,
        MAX_CONNECTIONS,
        MAX_HELD_BYTES,
        MAX_SESSION_BYTES,
    )

    parser = subparsers.add_parser(
        "serve-env",
        help="serve registered envs over HTTP (clients: skyrl_gym.make('remote', url=..., env_id=...))",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default loopback; any other needs a token)"
    )
    parser.add_argument("--port", type=port_number, default=8010, help="port (0: a free one, printed at start)")
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token every request must carry (default: ${TOKEN_ENV}); required off loopback",
    )
    parser.add_argument(
        "--tokens-file",
        default=None,
        metavar="FILE",
        help="a JSON object of client name -> token: each client has its own token, its own sessions (another "
        "client's calls on them are 404s) and at most --max-sessions-per-client of them",
    )
    parser.add_argument(
        "--max-sessions-per-client",
        type=int,
        default=None,
        help="with --tokens-file: sessions one client may hold (default: an equal share of --max-sessions)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, so that its register() calls add envs (repeatable)",
    )
    parser.add_argument(
        "--envs", default=None, help="comma-separated ids to serve (default: every registered id)"
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        help=f"sessions open at once; more are refused with 429 (default {DEFAULT_MAX_SESSIONS})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help=f"seconds after which an unused session is closed (default {DEFAULT_IDLE_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"largest request body; larger ones get 413 (default {MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--max-session-bytes",
        type=int,
        default=MAX_SESSION_BYTES,
        help="bytes one session may be sent in all (its row and actions, which its env keeps); past it a call "
        f"gets 413 (default {MAX_SESSION_BYTES})",
    )
    parser.add_argument(
        "--max-held-bytes",
        type=int,
        default=MAX_HELD_BYTES,
        help="the same, all sessions together; past it a call gets 503 until sessions close or expire "
        f"(default {MAX_HELD_BYTES})",
    )
    parser.add_argument(
        "--env-threads",
        type=int,
        default=DEFAULT_ENV_THREADS,
        help=f"threads for blocking env calls (default {DEFAULT_ENV_THREADS})",
    )
    parser.add_argument(
        "--build-threads",
        type=int,
        default=DEFAULT_BUILD_THREADS,
        help="threads that build envs for new sessions, and as many that run their init, apart from the env "
        f"threads, so slow creates and set-ups never hold running sessions' steps (default {DEFAULT_BUILD_THREADS})",
    )
    parser.add_argument(
        "--env-config",
        default=None,
        metavar="FILE",
        help='the operator\'s env_config per env, JSON {"*": {...}, "<env id>": {...}} (sandbox, judge, '
        "db_path, search_url, ceilings); clients may set only the keys docs/security.md lists",
    )
    parser.add_argument(
        "--allow-no-isolation",
        action="store_true",
        help="allow a sandbox with isolation 'none' in --env-config (client code on this host: trusted "
        "clients only)",
    )
    parser.add_argument(
        "--client-timeout",
        type=float,
        default=CLIENT_TIMEOUT_S,
        help="seconds a client has to send a request's head, and again its body; slower ones are cut off "
        f"(default {CLIENT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help="connections open at once; past it a new one is closed unless an idle one gives way. With "
        "--tokens-file a client's requests under way are at most its share, with room for one client more "
        f"(default {MAX_CONNECTIONS})",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from skyrl_gym.extras import install_command
    from skyrl_gym.remote import TOKEN_ENV

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as exc:
        print(
            f"error: `skyrl-gym serve-env` needs the 'env-service' extra ({exc.name} is not installed): "
            f"{install_command('env-service')}",
            file=sys.stderr,
        )
        return 2
    from skyrl_gym.remote.server import serve

    from skygym_sandboxes.origins import server_token

    if args.tokens_file and not args.token and os.environ.get(TOKEN_ENV):  # an old shared token is no client's
        print(f"note: with --tokens-file, ${TOKEN_ENV} is not read (every worker that held it would share one "
              "client); pass --token to add it as the client 'default'", file=sys.stderr)
    if args.tokens_file and args.token:  # server_token's advice (the variable) is not read with --tokens-file
        print('warning: --token is visible to every user of this machine in the process list; with --tokens-file, '
              'give the client "default" its token in the file instead', file=sys.stderr)
        token = args.token
    else:
        token = server_token(args.token, TOKEN_ENV) if args.token or not args.tokens_file else None
    if args.max_sessions_per_client is not None and not args.tokens_file:
        print("error: --max-sessions-per-client needs --tokens-file (without it, all clients are one)", file=sys.stderr)
        return 2
    if (
        args.max_sessions < 1
        or args.idle_timeout <= 0
        or args.max_body_bytes < 1024
        or args.max_session_bytes < args.max_body_bytes
        or args.max_held_bytes < args.max_session_bytes
        or args.max_connections < 2
        or args.env_threads < 1
        or args.build_threads < 1
        or not args.client_timeout > 0
        or (args.max_sessions_per_client is not None and args.max_sessions_per_client < 1)
    ):
        print(
            "error: --max-sessions, --max-sessions-per-client, --env-threads and --build-threads must be >= 1, "
            "--max-connections >= 2, --idle-timeout and --client-timeout > 0, "
            "--max-body-bytes >= 1024, --max-session-bytes >= --max-body-bytes, --max-held-bytes >= "
            "--max-session-bytes",
            file=sys.stderr,
        )
        return 2
    import importlib

    for module in args.imports:
        try:
            importlib.import_module(module)
        except Exception as exc:
            print(f"error: --import {module}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    from skyrl_gym.remote.policy import load_operator_config

    try:
        operator_config = (
            load_operator_config(args.env_config, args.allow_no_isolation) if args.env_config else {}
        )
    except ValueError as exc:
        print(f"skyrl-gym serve-env: {exc}", file=sys.stderr)
        return 2
    try:
        client_tokens = read_tokens_file(args.tokens_file) if args.tokens_file else None
    except ValueError as exc:
        print(f"error: --tokens-file {args.tokens_file}: {exc}", file=sys.stderr)
        return 2
    env_ids = [e.strip() for e in args.envs.split(",") if e.strip()] if args.envs else None
    if env_ids:
        import skyrl_gym

        from skyrl_gym.errors import UnregisteredEnv

        unknown = [e for e in env_ids if e not in skyrl_gym.registry]
        if unknown:
            said = []
            for env_id in unknown:  # each with the registry's own suggestion, as every other command gives it
                try:
                    skyrl_gym.spec(env_id)
                    said.append(f"{env_id!r} is not a registered id as written (give its full id)")
                except UnregisteredEnv as exc:
                    said.append(str(exc).split(" Run `skyrl-gym list`")[0])
            print(f"error: --envs: {' '.join(said)} Run `skyrl-gym list` to see them all.", file=sys.stderr)
            return 2
        from skyrl_gym.remote.policy import operator_keys_missing

        for env_id in env_ids:  # served but unusable: said now, not at each client's first session
            missing = operator_keys_missing(env_id, operator_config)
            if missing:
                print(f"warning: every session of {env_id!r} will be refused: {missing}; set it with "
                      f"{missing.fix}", file=sys.stderr)
    for env_id, key, path in missing_paths(operator_config, env_ids):
        # a client would read the refusal as its row's fault ("database file not found in the data folder")
        print(f"warning: --env-config {env_id}.{key} is {path!r}, which is not on this host: sessions of {env_id!r} "
              "that need it will be refused", file=sys.stderr)
    try:
        check_can_listen(args.host, args.port)
        serve(
            host=args.host,
            port=args.port,
            token=token,
            log_level=args.log_level,
            client_timeout_s=args.client_timeout,
            max_sessions=args.max_sessions,
            idle_timeout_s=args.idle_timeout,
            max_body_bytes=args.max_body_bytes,
            max_session_bytes=args.max_session_bytes,
            max_held_bytes=args.max_held_bytes,
            env_threads=args.env_threads,
            build_threads=args.build_threads,
            env_ids=env_ids,
            operator_config=operator_config,
            allow_no_isolation=args.allow_no_isolation,
            client_tokens=client_tokens,
            max_sessions_per_client=args.max_sessions_per_client,
            max_connections=args.max_connections,
        )
    except ValueError as exc:
        print(f"skyrl-gym serve-env: {exc}", file=sys.stderr)
        return 2
    return 0


def missing_paths(operator_config: dict, env_ids: Optional[List[str]]) -> List[Tuple[str, str, str]]:
    """(env id, key, path) for each ``*path`` key of the operator's config, for the served ids (or the sections the
    config names), whose path this host does not have."""
    from skyrl_gym.remote.policy import ANY_ENV, operator_env_config

    named = env_ids or [section for section in operator_config if section != ANY_ENV and not section.endswith("/*")]
    return [(env_id, key, value) for env_id in named
            for key, value in sorted(operator_env_config(operator_config, env_id).items())
            if key.endswith("path") and isinstance(value, str) and not os.path.exists(value)]


def read_tokens_file(path: str) -> dict:
    """The client name -> token object of ``path`` (JSON), or a ``ValueError`` saying what is wrong with it (the
    names and tokens themselves are checked by the server: ``check_client_tokens``)."""
    import json

    from skyrl_gym.remote.server import check_client_tokens

    try:
        with open(path, encoding="utf-8") as handle:
            tokens = json.load(handle)
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    example = '{"worker-a": "<token>", "worker-b": "<token>"}'
    if not isinstance(tokens, dict):
        raise ValueError(f"it must hold a JSON object of client name -> token, e.g. {example}")
    if not tokens:
        raise ValueError(f"it names no client: give each client a name and a token of its own, e.g. {example}")
    check_client_tokens(tokens, None)
    mode = os.stat(path).st_mode
    if mode & 0o077:  # the tokens are the clients' passwords
        print(f"warning: --tokens-file {path} can be read by other users of this machine (mode {mode & 0o777:o}): "
              f"chmod 600 {path}", file=sys.stderr)
    return tokens
