"""The env service: sessions of registered envs behind HTTP (FastAPI + uvicorn, as the sandbox service).

See :mod:`skyrl_gym.remote` for the protocol. Each session is one env built by :func:`skyrl_gym.make`; its calls run
one at a time (a per-session lock), blocking ones on a thread pool so the event loop keeps serving the others, and
envs that await their own I/O (``has_native_astep``) on the loop. A call that changes a session carries a
``request_id``: its answer is kept (the last few per session), and a retry with the same id gets that answer, also
when it arrives while the first call still runs, so a step is never applied twice. Sessions idle for longer than
``idle_timeout_s`` are closed by a sweeper; at most ``max_sessions`` are open at once.
"""

# No "from __future__ import annotations": FastAPI resolves the ``Request`` annotations of the routes.
import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import hashlib
import heapq
import itertools
import json
import logging
import re
import time
import uuid
from typing import Any, AsyncIterator, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from skygym_sandboxes.http_bodies import CLIENT_TIMEOUT_S, MAX_CONNECTIONS
from skygym_sandboxes.turns import Turns, turn_key

from skyrl_gym.remote import REMOTE_ID, TOKEN_ENV
from skyrl_gym.remote.wire import encode

LOG = logging.getLogger("uvicorn.error")  # uvicorn's own server log: shown at serve-env's --log-level

MAX_BODY_BYTES = (
    32 * 1024 * 1024
)  # the checker sends a 10 MB action: a remote env must take what a local one does
DEFAULT_MAX_SESSIONS = 4096
DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_ENV_THREADS = 32
# Envs are built on threads of their own: a build may wait minutes (a reasoning-gym setting tried in a child
# process), and creates with ever new settings held every env thread, so the steps of running sessions waited
# behind them.
DEFAULT_BUILD_THREADS = 16
RESULTS_KEPT = 8  # answers kept per session for retried calls (a client retries its latest call only)
# The bytes of those answers, all sessions together: an env may echo a 32 MB action into its answer, and 8 per
# session times thousands of sessions had no bound. Past it the oldest answers give way to a small 410.
MAX_KEPT_BYTES = 256 * 1024 * 1024
# What a session has been sent (its row, then every action) stays in memory for its life: envs keep the row and
# the chat history. 12 actions of 30 MB held 360 MB in one session; thousands of 32 MB rows had no bound. Past
# the first a call is a 413, past the second (all sessions together) a 503 until sessions close or expire.
MAX_SESSION_BYTES = 64 * 1024 * 1024
MAX_HELD_BYTES = 4 * 1024 * 1024 * 1024
# A session's calls run one at a time, and a client sends the next when the last has answered: past this many
# requests on a session running, waiting or joining a call under way (a retry with its request_id), a request is a
# 429. 4,100 connections, each with steps queued on one session (or each retrying the same one), held every
# connection of the server and hours of sandbox work after their client left.
MAX_CALLS_PER_SESSION = 2
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # whole ids only (fullmatch: "$" let a trailing newline in)

Reply = Tuple[int, bytes]


class Refused(Exception):
    """A request answered with a 4xx status and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


DEFAULT_CLIENT = "default"
SessionKey = Tuple[str, str]  # (client, session id)
"""The client of a server with one token, or none."""
MIN_TOKEN_CHARS = 16


def check_client_tokens(tokens: Mapping[str, str], token: Optional[str]) -> Dict[str, str]:
    """``tokens`` (client name -> token), with ``token`` as the client ``default``'s when both are given; empty
    when only ``token`` (or nothing) is. Raises ``ValueError`` naming a name or token that cannot serve."""
    if not tokens:
        return {}
    clients = dict(tokens)
    if token:
        if DEFAULT_CLIENT in clients:
            raise ValueError(f"the client name {DEFAULT_CLIENT!r} is the single token's (--token); name it otherwise")
        clients[DEFAULT_CLIENT] = token
    for name, value in clients.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a client's name must be a non-empty string, got {name!r}")
        if not isinstance(value, str) or len(value) < MIN_TOKEN_CHARS or value != value.strip():
            raise ValueError(f"client {name!r}: its token must be a string of at least {MIN_TOKEN_CHARS} characters "
                             "without surrounding spaces")
    if len(set(clients.values())) < len(clients):
        raise ValueError("two clients have the same token: each client needs its own")
    return clients


def listening_auth(token: Optional[str], client_tokens: Optional[Mapping[str, str]]) -> str:
    """How the listening line describes the server's auth."""
    if client_tokens:
        names = sorted(client_tokens) + (["default (--token)"] if token else [])
        return f"a bearer token per client: {', '.join(names)}"
    return "bearer token required" if token else "no token"


def row_digest(client: str, env_id: str, env_config: Any, extras: Any) -> str:
    """What a create asks for, and for whom, as a digest: a retry of it sends the same."""
    text = json.dumps([client, env_id, env_config, extras], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Session:
    def __init__(self, session_id: str, env_id: str, env: Any, client: str = DEFAULT_CLIENT) -> None:
        self.session_id = session_id
        self.client = client  # who created it: only its calls reach it
        # its key among the server's sessions: ids are each client's own, so another client's create of the same id
        # makes a session of its own (it can neither take this one over nor learn that the id is in use)
        self.key: SessionKey = (client, session_id)
        self.env_id = env_id
        self.env = env
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self.results: "collections.OrderedDict[str, Reply]" = collections.OrderedDict()
        self.pending: Dict[str, "asyncio.Future[Reply]"] = {}
        self.held_bytes = 0  # what the bodies it was sent (row, prompt, actions) cost to hold (read_json)
        self.calls = 0  # requests running, waiting for the lock, or joining the call under way (a retry)
        self.closed = False  # closed while calls waited: they answer 410 without running
        self.row_digest = ""  # of the create that made it (see create_session): a retry must send the same

    def describe(self, created: bool) -> Dict[str, Any]:
        env = self.env
        schemas = getattr(env, "tool_schemas", None)
        try:
            tool_schemas = schemas() if callable(schemas) else []
        except Exception:
            tool_schemas = []
        max_turns = getattr(env, "max_turns", None)
        return {
            "session_id": self.session_id,
            "env_id": self.env_id,
            "created": created,
            "max_turns": max_turns if isinstance(max_turns, int) else None,
            "max_turns_is_default": bool(getattr(env, "max_turns_is_default", False)),
            "tool_schemas": tool_schemas,
        }

    @property
    def busy(self) -> bool:
        return self.lock.locked() or bool(self.pending)


def create_app(
    token: Optional[str] = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    env_threads: int = DEFAULT_ENV_THREADS,
    build_threads: int = DEFAULT_BUILD_THREADS,
    env_ids: Optional[Sequence[str]] = None,
    operator_config: Optional[Mapping[str, Any]] = None,
    allow_no_isolation: bool = False,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
    max_kept_bytes: int = MAX_KEPT_BYTES,
    max_session_bytes: int = MAX_SESSION_BYTES,
    max_held_bytes: int = MAX_HELD_BYTES,
    client_tokens: Optional[Mapping[str, str]] = None,
    max_sessions_per_client: Optional[int] = None,
    max_connections: int = MAX_CONNECTIONS,
) -> Any:
    """A FastAPI app serving sessions of registered envs (``env_ids``: only these; default: every id).

    ``operator_config`` is the operator's ``env_config`` per env (``{"*": {...}, "<env id>": {...}}``, see
    :mod:`skyrl_gym.remote.policy`): every session is built with it, and a client's ``env_config`` may add
    only the keys the policy lets a client set, within its bounds (422 naming the key otherwise). A sandbox
    without isolation in it raises ``ValueError`` unless ``allow_no_isolation``. A session may be sent at most
    ``max_session_bytes`` (its row, prompt and actions, which its env keeps), all sessions together
    ``max_held_bytes``. Envs are built on ``build_threads`` threads, their ``init`` runs on as many others, their
    other calls on ``env_threads`` more: slow creates and set-ups never hold the threads that step running sessions,
    and slow creates never hold the inits of sessions already made.

    ``client_tokens`` (name -> token) gives each client a token of its own (``token``, if also given, is the client
    ``default``'s): a session belongs to the client that created it (another client's calls on it are a 404, its
    creates of the id a 409), and a client holds at most ``max_sessions_per_client`` sessions (default: an equal
    share of ``max_sessions``) and at most its share of ``max_connections`` requests under way (the server's
    connection limit, :func:`~skygym_sandboxes.http_bodies.guarded_http_protocol`'s)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from skygym_sandboxes.http_bodies import (
        NO_PUBLIC_DOCS,
        BYTES_PER_JSON_VALUE,
        BodyBudget,
        BodyError,
        BodyParsers,
        BearerTokens,
        held_bytes,
        parse_json_object,
        refusal,
    )

    from skyrl_gym.errors import DataError, EnvCreationError, MissingRewardSpec, UnregisteredEnv
    from skyrl_gym.registration import make, spec
    from skyrl_gym.rewards.judge import JudgeError
    from skyrl_gym.remote.policy import (
        MAX_TURNS,
        PolicyError,
        check_operator_config,
        check_row,
        effective_env_config,
    )

    operator = check_operator_config(operator_config or {}, allow_no_isolation)
    clients = check_client_tokens(client_tokens or {}, token)
    owners = BearerTokens(clients)
    per_client = (int(max_sessions_per_client) if max_sessions_per_client is not None
                  else max(1, max_sessions // max(1, len(clients))))
    per_client_said = (f"--max-sessions-per-client {per_client}" if max_sessions_per_client is not None else
                       f"{per_client}, its share of --max-sessions {max_sessions} over {len(clients)} clients; "
                       "--max-sessions-per-client sets it")
    # What building an env from a client's row raises when the row is wrong: a 422 naming it, not a 500.
    # OverflowError: a number no int holds (a seed of 1e400). JudgeError: the row asks for a judge that this
    # server's config does not give (building an env reaches no judge yet).
    row_errors = (DataError, MissingRewardSpec, EnvCreationError, TypeError, ValueError, OverflowError, JudgeError)

    sessions: Dict[SessionKey, Session] = {}
    creating: Dict[SessionKey, Tuple[str, "asyncio.Future[Reply]"]] = {}  # (client, session id) -> (digest, its build)
    held = [0]  # Session.held_bytes of every session, and of the creates under way
    stopping = [False]  # set once the server has closed its sessions on its way out
    env_threads, build_threads = max(1, env_threads), max(1, build_threads)
    threads = concurrent.futures.ThreadPoolExecutor(env_threads, thread_name_prefix="env")
    builders = concurrent.futures.ThreadPoolExecutor(build_threads, thread_name_prefix="env-build")
    # inits are set-up too (the swe env starts its container), but of sessions already made: not behind slow builds
    initializers = concurrent.futures.ThreadPoolExecutor(build_threads, thread_name_prefix="env-init")
    # A pool's threads go to clients in turns (the client holding the fewest first), not in arrival order: one
    # client's queue of slow steps made another's step wait behind all of it. The env work a step does on its
    # thread (math-verify helpers, the code envs' sandbox pool) takes turns by the same client, through the context.
    turns = {threads: Turns(env_threads), builders: Turns(build_threads), initializers: Turns(build_threads)}
    stats = {
        "sessions_created": 0,
        "sessions_expired": 0,
        "sessions_closed": 0,
        "steps": 0,
        "retries_answered": 0,
        "refused": 0,
        "env_errors": 0,
        "calls_running": 0,  # env calls under way now (a gauge, not a counter)
    }
    allowed = set(env_ids) if env_ids else None

    async def in_thread(fn: Callable[..., Any], *args: Any, pool: Any = threads) -> Any:
        # the pool's own queue never holds a call: a call reaches it with its turn, and its thread gives it back
        return await turns[pool].run_in_thread(pool, fn, *args)

    kept: Dict[Tuple[SessionKey, str], int] = {}  # (session key, request id) -> bytes of the answer kept for a retry
    kept_bytes = [0]
    kept_by_session: Dict[SessionKey, int] = {}
    kept_by_client: Dict[str, int] = collections.defaultdict(int)
    # each client's sessions by bytes kept, largest first: (-bytes, order, session key); an entry whose bytes are no
    # longer the session's is stale and skipped when it comes up (each change pushes a fresh one)
    holders: Dict[str, List[Tuple[int, int, SessionKey]]] = collections.defaultdict(list)
    pushes = itertools.count()

    def note_holder(session_key: SessionKey) -> None:
        heap, total = holders[session_key[0]], kept_by_session.get(session_key, 0)
        if total:
            heapq.heappush(heap, (-total, next(pushes), session_key))
        if len(heap) > 4 * len(kept_by_session) + 64:  # stale entries: built again from the totals
            heap[:] = [(-size, next(pushes), key) for key, size in kept_by_session.items() if key[0] == session_key[0]]
            heapq.heapify(heap)

    def unkeep(key: Tuple[SessionKey, str]) -> None:
        size = kept.pop(key, None)
        if size is None:
            return
        kept_bytes[0] -= size
        kept_by_client[key[0][0]] -= size
        left = kept_by_session[key[0]] - size
        if left:
            kept_by_session[key[0]] = left
        else:
            del kept_by_session[key[0]]

    def oldest_to_drop(newest: Tuple[SessionKey, str]) -> Optional[Tuple[SessionKey, str]]:
        """The answer that gives way: from the client keeping the most bytes, its session keeping the most, that
        session's oldest, never ``newest``. By session alone, a client spreading its answers over many sessions,
        each smaller than another client's one answer, pushed that answer out (an attacker's pass)."""
        for client in sorted(kept_by_client, key=kept_by_client.__getitem__, reverse=True):
            heap, set_aside, found = holders[client], [], None
            while heap and found is None:
                entry = heapq.heappop(heap)
                owner_key = entry[2]
                if -entry[0] != kept_by_session.get(owner_key):
                    continue  # stale
                owner = sessions.get(owner_key)
                found = next((key for key in ((owner_key, rid) for rid in (owner.results if owner else ()))
                              if key in kept and key != newest), None)
                set_aside.append(entry)  # it still keeps answers (the one found goes below, and it is pushed anew)
            for entry in set_aside:
                heapq.heappush(heap, entry)
            if found is not None:
                return found
        return None

    def keep(session: Session, request_id: str, result: Reply) -> None:
        """Keep ``result`` for a retry of ``request_id``, within RESULTS_KEPT per session and max_kept_bytes
        in all; an answer dropped for the budget leaves a 410 saying so (a retry never runs a call twice).
        Past the budget, answers go from the client, then the session, that keeps the most bytes, its oldest first,
        never the one just kept (:func:`oldest_to_drop`): oldest first across sessions let one client's big answers
        push out another's (a retry of a step already applied then got a 410, and that rollout's reward was lost).
        Each answer dropped costs a heap operation per client (a scan of every session per answer took 33 s for
        one big answer among 4096 sessions)."""
        session_key = session.key
        session.results[request_id] = result
        newest = (session_key, request_id)
        kept[newest] = len(result[1])
        kept_bytes[0] += len(result[1])
        kept_by_client[session.client] += len(result[1])
        kept_by_session[session_key] = kept_by_session.get(session_key, 0) + len(result[1])
        while len(session.results) > RESULTS_KEPT:
            old_id, _ = session.results.popitem(last=False)
            unkeep((session_key, old_id))
        note_holder(session_key)
        while kept_bytes[0] > max_kept_bytes:
            dropped = oldest_to_drop(newest)
            if dropped is None:
                break
            owner_key, old_id = dropped
            unkeep(dropped)
            note_holder(owner_key)
            sessions[owner_key].results[old_id] = (
                410,
                encode(
                    {
                        "error": f"the answer to request {old_id!r} was applied once and then dropped: "
                        f"the server keeps at most {max_kept_bytes} bytes of answers for retries"
                    }
                ),
            )

    def forget(session: Session) -> None:
        for request_id in session.results:
            unkeep((session.key, request_id))

    held_by: Dict[str, int] = collections.defaultdict(int)  # client -> bytes its sessions and creates hold

    def release(client: str, size: int) -> None:
        held[0] -= size
        held_by[client] -= size

    def charge(session: Optional[Session], size: int, client: str) -> None:
        """Count ``size`` more bytes as held by ``session`` (None: one being created) of ``client``, or refuse the
        call."""
        already = session.held_bytes if session is not None else 0
        if already + size > max_session_bytes:
            what = f"session {session.session_id!r} holds {already} bytes and " if session else "a row of "
            raise Refused(413, f"{what}{size} more would pass --max-session-bytes {max_session_bytes} (its env keeps "
                               f"its row and actions for the session's life; a body counts what it holds in "
                               f"memory: its strings at 1, 2 or 4 bytes a character, and {BYTES_PER_JSON_VALUE} "
                               f"per JSON value); start a new session")
        # New sessions may fill three quarters of the budget, and the sessions holding more than their share of it
        # as well: the rest is for the steps of the others, which a client filling the budget with its own creates
        # and steps would otherwise have refused with 503s (an attacker's pass, then a review).
        reserve = max_held_bytes * 3 // 4
        fair_share = max_held_bytes // max(1, len(sessions))
        within_share = session is not None and session.held_bytes + size <= fair_share
        limit = max_held_bytes if within_share else reserve
        if held[0] + size > limit:
            why = "" if limit == max_held_bytes else (
                ", of which new sessions' rows may take three quarters" if session is None else
                f", of which sessions holding more than their share ({fair_share} bytes) may take three quarters")
            raise Refused(503, f"the service holds {held[0]} bytes of sessions' rows and actions, its limit "
                               f"(--max-held-bytes {max_held_bytes}{why}); retry when sessions have closed or "
                               f"expired ({idle_timeout_s:g} s idle)")
        client_share = max_held_bytes // max(1, len(clients))  # with --tokens-file: one client, one share
        if clients and held_by[client] + size > client_share:
            raise Refused(503, f"client {client!r} holds {held_by[client]} bytes of sessions' rows and actions, its "
                               f"share of --max-held-bytes {max_held_bytes} ({client_share} bytes: the budget over "
                               f"the {len(clients)} clients); close sessions or wait for idle ones to expire "
                               f"({idle_timeout_s:g} s idle)")
        held[0] += size
        held_by[client] += size
        if session is not None:
            session.held_bytes += size

    async def close_session(session: Session) -> Optional[str]:
        session.closed = True  # the calls waiting for its lock give way (the one running finishes)
        forget(session)
        release(session.client, session.held_bytes)
        session.held_bytes = 0
        async with session.lock:
            try:
                await in_thread(session.env.close)
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
        return None

    async def sweep() -> None:
        period = max(0.05, min(idle_timeout_s / 4, 30.0))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for session in [
                s for s in sessions.values() if not s.busy and now - s.last_used > idle_timeout_s
            ]:
                if sessions.get(session.key) is session:
                    del sessions[session.key]
                    stats["sessions_expired"] += 1
                    await close_session(session)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        sweeper = asyncio.ensure_future(sweep())
        try:
            yield
        finally:
            sweeper.cancel()
            stopping[0] = True
            for session in list(sessions.values()):
                sessions.pop(session.key, None)
                await close_session(session)
            threads.shutdown(wait=False, cancel_futures=True)
            builders.shutdown(wait=False, cancel_futures=True)
            initializers.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="skyrl-gym env service", lifespan=lifespan, **NO_PUBLIC_DOCS)

    @app.exception_handler(StarletteHTTPException)
    async def framework_error(request: Request, exc: StarletteHTTPException) -> Response:
        """An unknown path or method, answered as every other error here: ``{"error": ...}``, not ``{"detail": ...}``,
        and counted with them in ``/health``'s ``refused``."""
        stats["refused"] += 1
        return Response(encode({"error": str(exc.detail)}), status_code=exc.status_code, headers=exc.headers,
                        media_type="application/json")

    def reply(status: int, payload: Any) -> Response:
        return Response(encode(payload), status_code=status, media_type="application/json")

    def refuse(status: int, message: str) -> Response:
        stats["refused"] += 1
        said(f"refused ({status}): {message}")
        return reply(status, {"error": message})

    def said(what: str) -> None:
        """A line for the operator, naming the client (shown from --log-level info): which worker did what."""
        client = turn_key.get()
        LOG.info("client %s: %.500s", repr(client) if client is not None else "(no valid token)", what)

    # With a token per client, a client's requests under way (from its token's check to its answer) are bounded by
    # a share of the server's connections that leaves others room: a request under way holds its connection, and
    # past the connection limit a new connection is closed at once unless an idle one can give way. Two clients'
    # sessions (2,048 each) with two slow steps each under way held all 4,096 connections, and the other client's
    # connections were closed (an attacker's pass).
    per_client_requests = max(1, max_connections // (len(clients) + 1))
    under_way: Dict[str, int] = collections.defaultdict(int)
    counted = contextvars.ContextVar("counted", default=None)  # the client whose count this request holds

    def authorise(request: Request) -> str:
        """The client making ``request`` (``default`` on a server of one token, or none), or a refusal."""
        why = refusal(request, token, TOKEN_ENV, tokens=owners or None)
        if why:
            raise Refused(*why)
        client = (owners.owner(request) or DEFAULT_CLIENT) if owners else DEFAULT_CLIENT  # one digest lookup more
        turn_key.set(client)  # whose work this request's env calls are, for the pools' turns
        if clients and counted.get() is None:
            if under_way[client] >= per_client_requests:
                raise Refused(429, f"client {client!r} has {under_way[client]} requests under way, its share of "
                                   f"the server's {max_connections} connections over {len(clients)} clients and "
                                   "room for one more; send more when some have answered")
            under_way[client] += 1
            counted.set(client)
        return client

    parsers = BodyParsers()
    bodies = BodyBudget(max_body_bytes, len(clients))  # the bodies being read and parsed, a share to each client

    def parse(raw: bytes) -> Tuple[Dict[str, Any], int]:
        body = parse_json_object(raw) if raw else {}
        return body, held_bytes(body)

    async def read_json(request: Request) -> Tuple[str, Dict[str, Any], int]:
        """The client (:func:`authorise`), the body, and what it costs to hold (``held_bytes``: 3 million empty objects are 9 MB on the wire and over
        1 GB parsed; one emoji makes CPython store a whole string at 4 bytes a character). Parsed and checked in a
        thread (``BodyParsers``)."""
        client = authorise(request)
        try:  # the size limit holds while the body streams in (chunked ones too); deep nesting is refused
            async with bodies.body(request, max_body_bytes, "--max-body-bytes", client_timeout_s, client) as raw:
                return (client, *await parsers.run(parse, raw, size=len(raw)))  # then the budgets count what it holds
        except BodyError as exc:
            raise Refused(exc.status, exc.message) from None

    def optional_id(body: Dict[str, Any], field: str) -> Optional[str]:
        value = body.get(field)
        if value is None:
            return None
        if not isinstance(value, str) or not _ID.fullmatch(value):
            raise Refused(
                422, f"{field} must be 1-128 characters of letters, digits and _.:-, got {value!r:.80}"
            )
        return value

    def optional_dict(body: Dict[str, Any], field: str) -> Optional[Dict[str, Any]]:
        value = body.get(field)
        if value is not None and not isinstance(value, dict):
            raise Refused(422, f"{field} must be a JSON object (or null), got {type(value).__name__}")
        return value

    def session_of(session_id: str, client: str) -> Session:
        session = sessions.get((client, session_id))  # another client's is as good as none
        if session is None:
            raise Refused(
                404,
                f"no session {session_id!r}: it was closed, expired after {idle_timeout_s:g} s "
                f"idle, or never existed (create one with POST /sessions)",
            )
        return session

    def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
        async def route(request: Request) -> Response:
            counted.set(None)  # each request counts once, from its authorise() to its answer
            try:
                status, payload = await handler(request)
            except Refused as exc:
                return refuse(exc.status, exc.message)
            finally:
                client = counted.get()
                if client is not None:
                    under_way[client] -= 1
            return Response(payload, status_code=status, media_type="application/json")

        route.__name__ = handler.__name__
        return route

    # ----- sessions ---------------------------------------------------------------------------------------------
    async def create_session(request: Request) -> Reply:
        client, body, size = await read_json(request)
        chosen = optional_id(body, "session_id")  # a client's own id: a retry of its create sends it again
        session_id = chosen or uuid.uuid4().hex
        key = (client, session_id)
        env_id = body.get("env_id")
        if not isinstance(env_id, str) or not env_id:
            raise Refused(422, "env_id is required: the registered id of the env to serve (e.g. 'gsm8k')")
        env_config, extras = optional_dict(body, "env_config"), optional_dict(body, "extras")
        asked = (client, env_id, env_config, extras)  # the digest's (env_config becomes the effective one below)

        def made_before(digest: str) -> Optional["asyncio.Future[Reply]"]:
            """The answer of the create that made (or is making) ``session_id``, if this is a retry of it; a 409 if
            another create made it."""
            existing, pending = sessions.get(key), creating.get(key)
            if existing is None and pending is None:
                return None
            if digest != (existing.row_digest if existing is not None else pending[0]):
                # the same answer whatever the session holds: a client learns nothing of another's session, and
                # cannot take one over by sending its id first (its env, row and rewards would be the other's)
                raise Refused(409, f"session id {session_id!r} is taken by a create with another env or row; a "
                                   "client's session ids must be its own: choose a random one (the Python client "
                                   "sends a uuid4), or leave session_id out and the service picks one")
            if existing is not None:
                done: "asyncio.Future[Reply]" = asyncio.get_running_loop().create_future()
                done.set_result((200, encode(existing.describe(created=False))))
                return done
            return pending[1]

        if chosen is not None and (key in sessions or key in creating):  # a retry answers before any limit
            earlier = made_before(await parsers.run(row_digest, *asked, size=size))
            if earlier is not None:
                return await asyncio.shield(earlier)
        if env_id == REMOTE_ID:
            raise Refused(422, "the service serves local envs; 'remote' would chain services")
        if allowed is not None and env_id not in allowed:
            raise Refused(404, f"this service serves only {sorted(allowed)}, not {env_id[:80]!r}")
        try:
            creator = spec(env_id).load_entry_point()
        except UnregisteredEnv as exc:
            raise Refused(404, str(exc))
        except Exception as exc:  # a broken plugin: the server's fault, said as such
            stats["env_errors"] += 1
            raise Refused(500, f"loading env {env_id!r} raised {type(exc).__name__}: {exc}")
        try:  # the operator's settings, plus what the client may choose within them
            env_config = effective_env_config(operator, env_id, env_config, creator)
            check_row(extras)
        except PolicyError as exc:
            raise Refused(422, str(exc))
        digest = ""  # an id the service picks is no other create's
        if chosen is not None:  # after the cheap refusals: a digest reads the whole row
            digest = await parsers.run(row_digest, *asked, size=size)
            earlier = made_before(digest)  # another create of this id may have come in meanwhile
            if earlier is not None:
                return await asyncio.shield(earlier)
        # no wait from here to the build's start: a second create of the id finds this one
        if len(sessions) + len(creating) >= max_sessions:
            raise Refused(
                429,
                f"the service holds {len(sessions)} sessions, its limit (--max-sessions "
                f"{max_sessions}); close sessions or wait for idle ones to expire "
                f"({idle_timeout_s:g} s)",
            )
        if clients:
            mine = sum(k[0] == client for k in sessions) + sum(k[0] == client for k in creating)
            if mine >= per_client:
                raise Refused(429, f"client {client!r} holds {mine} sessions, its limit ({per_client_said}); close "
                                   f"sessions or wait for idle ones to expire ({idle_timeout_s:g} s)")
        charge(None, size, client)

        async def build() -> Reply:
            try:
                env = await in_thread(lambda: make(env_id, env_config=env_config, extras=extras), pool=builders)
            except row_errors as exc:
                release(client, size)
                return 422, encode(
                    {
                        "error": f"cannot build env {env_id!r} from this row: {type(exc).__name__}: {exc}",
                        "error_type": type(exc).__name__,
                    }
                )
            except Exception as exc:
                release(client, size)
                stats["env_errors"] += 1
                return 500, encode(
                    {
                        "error": f"building env {env_id!r} raised {type(exc).__name__}: {exc}",
                        "error_type": type(exc).__name__,
                        "method": "make",
                    }
                )
            if stopping[0]:  # built after the server closed its sessions: nobody would close this one
                release(client, size)
                with contextlib.suppress(Exception):  # on the loop: the threads may be shut down already
                    env.close()
                return 503, encode({"error": "the service is stopping", "error_type": "Stopping"})
            session = Session(session_id, env_id, env, client)
            session.held_bytes, session.row_digest = size, digest
            sessions[key] = session
            stats["sessions_created"] += 1
            return 200, encode(session.describe(created=True))

        future = asyncio.ensure_future(build())
        creating[key] = (digest, future)
        try:
            return await asyncio.shield(future)
        finally:
            if future.done():
                creating.pop(key, None)
            else:
                future.add_done_callback(lambda _f: creating.pop(key, None))

    def refuse_past_the_cap(session: Session) -> None:
        if session.calls >= MAX_CALLS_PER_SESSION:
            raise Refused(429, f"session {session.session_id!r} already has {session.calls} requests running or "
                               f"waiting: its calls run one at a time; send the next when the last has answered")

    async def call(
        session: Session, request_id: Optional[str], method: str, operation: Callable[[], Any], size: int = 0,
        touches: bool = True,
    ) -> Reply:
        """Run ``operation`` on the session once per ``request_id``; a retry gets the first call's answer. The
        ``size`` bytes of the request count towards what the session holds (not again for a retry). A call that
        does not ``touch`` the session (a read of its metrics) leaves its idle time running."""
        if request_id is not None:
            done = session.results.get(request_id)
            if done is not None:
                stats["retries_answered"] += 1
                return done
            running = session.pending.get(request_id)
            if running is not None:  # joins the call under way, and counts as one while it waits for it
                refuse_past_the_cap(session)
                stats["retries_answered"] += 1
                session.calls += 1
                try:
                    return await asyncio.shield(running)
                finally:
                    session.calls -= 1
        refuse_past_the_cap(session)
        charge(session, size, session.client)
        session.calls += 1

        async def run() -> Reply:
            try:
                return await run_in_turn()
            finally:
                session.calls -= 1

        async def run_in_turn() -> Reply:
            async with session.lock:
                if session.closed:
                    if request_id is not None:
                        session.pending.pop(request_id, None)
                    return 410, encode({"error": f"session {session.session_id!r} was closed before this "
                                                 f"{method}() ran; it did not run"})
                if touches:
                    session.last_used = time.monotonic()
                stats["calls_running"] += 1
                try:
                    result: Reply = (200, encode(await operation()))
                except Refused as exc:
                    result = (exc.status, encode({"error": exc.message}))
                except Exception as exc:  # the env raised: the client's caller reports it as an env error
                    stats["env_errors"] += 1
                    said(f"{method}() of env {session.env_id!r} raised {type(exc).__name__}: {exc}")
                    result = (
                        500,
                        encode(
                            {
                                "error": f"{method}() of env {session.env_id!r} raised "
                                f"{type(exc).__name__}: {exc}",
                                "error_type": type(exc).__name__,
                                "method": method,
                            }
                        ),
                    )
                finally:
                    stats["calls_running"] -= 1
                if touches:
                    session.last_used = time.monotonic()
                if request_id is not None:
                    if sessions.get(session.key) is session:  # a session closed meanwhile keeps nothing
                        keep(session, request_id, result)
                    session.pending.pop(request_id, None)
                return result

        task = asyncio.ensure_future(
            run()
        )  # shielded: a client that hangs up does not cancel a step half-way
        if request_id is not None:
            session.pending[request_id] = task
        return await asyncio.shield(task)

    async def init_session(request: Request) -> Reply:
        client, body, size = await read_json(request)  # the token first: a caller learns nothing of sessions
        session = session_of(request.path_params["session_id"], client)
        request_id = optional_id(body, "request_id")
        prompt = body.get("prompt")
        if prompt is not None and not isinstance(prompt, list):
            raise Refused(
                422, f"prompt must be a list of chat messages (or null), got {type(prompt).__name__}"
            )

        async def operation() -> Any:  # setting up, as a build is (the swe env starts its container here)
            observation, info = await in_thread(session.env.init, prompt, pool=initializers)
            return {"observation": observation, "info": info}

        return await call(session, request_id, "init", operation, size)

    async def step_session(request: Request) -> Reply:
        client, body, size = await read_json(request)  # the token first: a caller learns nothing of sessions
        session = session_of(request.path_params["session_id"], client)
        request_id = optional_id(body, "request_id")
        if "action" not in body:
            raise Refused(422, "action is required (the model's text)")
        action, max_turns = body["action"], body.get("max_turns")
        if max_turns is not None:  # within the bounds a row's or an env_config's max_turns has
            try:
                max_turns = int(MAX_TURNS.check("max_turns", max_turns, None, where="max_turns"))
            except PolicyError as exc:
                raise Refused(422, str(exc)) from None

        async def operation() -> Any:
            env = session.env
            if max_turns is not None and getattr(env, "max_turns", None) != max_turns:
                env.max_turns = max_turns  # the client's driver told its env the episode's turn limit
            # A wrapper's own astep does not count: the judge's wraps a blocking env's step in a thread of asyncio's,
            # outside the env threads and their turns (a client's judged steps then held up everyone's).
            if env.unwrapped.has_native_astep:
                output = await env.astep(action)
            else:
                output = await in_thread(env.step, action)
            stats["steps"] += 1
            turns = getattr(env, "turns", None)
            answer = {"output": output, "turns": turns if isinstance(turns, int) else None}
            get_metrics = getattr(env, "get_metrics", None)
            if isinstance(output, dict) and output.get("done") and callable(get_metrics):
                answer["metrics"] = await in_thread(get_metrics)  # saves the client a round trip at the end
            return answer

        return await call(session, request_id, "step", operation, size)

    async def session_metrics(request: Request) -> Reply:
        session = session_of(request.path_params["session_id"], authorise(request))

        async def operation() -> Any:
            get_metrics = getattr(session.env, "get_metrics", None)
            return await in_thread(get_metrics) if callable(get_metrics) else {}

        return await call(session, None, "get_metrics", operation, touches=False)  # reads keep no session alive

    async def delete_session(request: Request) -> Reply:
        client = authorise(request)
        session = sessions.get((client, request.path_params["session_id"]))
        if session is None:
            return 200, encode({"closed": False})
        sessions.pop(session.key, None)
        stats["sessions_closed"] += 1
        error = await close_session(session)
        return 200, encode({"closed": True, **({"close_error": error} if error else {})})

    async def health(request: Request) -> Reply:
        authorise(request)
        return 200, encode(
            {
                "status": "ok",
                "sessions": len(sessions),
                "max_sessions": max_sessions,
                "idle_timeout_s": idle_timeout_s,
                "max_body_bytes": max_body_bytes,
                "kept_answer_bytes": kept_bytes[0],
                "held_bytes": held[0],
                "max_session_bytes": max_session_bytes,
                "max_held_bytes": max_held_bytes,
                **stats,
                # calls waiting behind their session's call under way (a gauge)
                "calls_waiting": sum(s.calls - s.lock.locked() for s in sessions.values()),
                # env calls (builds, inits, steps) waiting for their turn at a thread (a gauge)
                "calls_waiting_for_threads": sum(pool_turns.waiting() for pool_turns in turns.values()),
            }
        )

    app.add_api_route("/sessions", guarded(create_session), methods=["POST"])
    app.add_api_route("/sessions/{session_id}/init", guarded(init_session), methods=["POST"])
    app.add_api_route("/sessions/{session_id}/step", guarded(step_session), methods=["POST"])
    app.add_api_route("/sessions/{session_id}/metrics", guarded(session_metrics), methods=["GET"])
    app.add_api_route("/sessions/{session_id}", guarded(delete_session), methods=["DELETE"])
    app.add_api_route("/health", guarded(health), methods=["GET"])
    return app


def serve(
    host: str = "127.0.0.1",
    port: int = 8010,
    token: Optional[str] = None,
    log_level: str = "warning",
    client_timeout_s: float = CLIENT_TIMEOUT_S,
    **app_options: Any,
) -> None:
    """Serve until SIGINT/SIGTERM (every open env is closed on the way out); prints the URL once listening.
    Binding anything but a loopback address needs a bearer ``token``. A client has ``client_timeout_s`` to
    send each request's head and, again, its body. ``app_options`` are :func:`create_app`'s (its
    ``max_connections`` bounds the listener's connections too)."""
    from skygym_sandboxes.http_bodies import is_loopback

    from skyrl_gym.retrieval.server import run_server

    if not token and not app_options.get("client_tokens") and not is_loopback(host):
        raise ValueError(
            f"refusing to serve envs on {host} without a bearer token: anyone who can reach it could "
            f"run the envs (and their tools). Set {TOKEN_ENV} (or pass --token), or bind 127.0.0.1"
        )
    # ValueError: an operator setting is refused
    app = create_app(token=token, client_timeout_s=client_timeout_s, **app_options)
    run_server(
        app,
        host,
        port,
        log_level,
        60,
        client_timeout_s,
        lambda url: (f"env service listening on {url} ({listening_auth(token, app_options.get('client_tokens'))}; "
                     f"serving {', '.join(app_options['env_ids']) if app_options.get('env_ids') else 'every registered env'})"),
        app_options.get("max_connections"),  # the app's per-client share of requests is reckoned from the same
    )


__all__ = [
    "create_app",
    "serve",
    "encode",
    "Refused",
    "MAX_BODY_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_IDLE_TIMEOUT_S",
]
