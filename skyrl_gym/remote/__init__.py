"""Envs as a service: ``skyrl-gym serve-env`` serves registered envs over HTTP, and :class:`RemoteEnv`
(``skyrl_gym.make("remote", url=..., env_id=...)``) drives one of them like a local env.

The protocol (JSON bodies; every call that changes a session carries a ``request_id``, so that a retried call is
answered from the first one's result instead of being applied twice):

==========================================  =====================================================================
``POST /sessions``                          ``{"session_id", "env_id", "env_config", "extras"}``: build the env
                                            (``skyrl_gym.make``); creating an existing ``session_id`` again is a
                                            no-op. Answers ``session_id``, ``max_turns``, ``max_turns_is_default``,
                                            ``tool_schemas``.
``POST /sessions/{id}/init``                ``{"prompt", "request_id"}`` -> ``{"observation", "info"}``
``POST /sessions/{id}/step``                ``{"action", "request_id", "max_turns"?}`` -> ``{"output", "turns"}``
                                            (``output`` is the env's ``StepOutput``)
``GET /sessions/{id}/metrics``              the env's ``get_metrics()``
``DELETE /sessions/{id}``                   close the env (again: ``{"closed": false}``)
``GET /health``                             sessions open, limits, counters
==========================================  =====================================================================

Errors are JSON ``{"error": message}``: 400 (not JSON, or nested too deep), 401 (token), 404 (unknown env id
or session), 408 (a body slower than ``--client-timeout``), 410 (a retried call whose kept answer was dropped
to bound the server's memory: the call was applied once), 413 (body too large, refused while it streams), 422
(a field is wrong, an ``env_config`` key a client may not set or a value above its ceiling
(:mod:`skyrl_gym.remote.policy`), or the env refused the row), 429 (too many sessions), 500 (the env raised:
the message names the call and the exception).
"""

TOKEN_ENV = "SKYRL_GYM_ENV_SERVICE_TOKEN"
URL_ENV = "SKYRL_GYM_ENV_SERVICE_URL"
REMOTE_ID = "remote"


def __getattr__(
    name: str,
):  # RemoteEnv without importing the client (and requests) at `import skyrl_gym.remote`
    if name == "RemoteEnv":
        from skyrl_gym.remote.client import RemoteEnv

        return RemoteEnv
    if name == "RemoteEnvError":
        from skyrl_gym.remote.client import RemoteEnvError

        return RemoteEnvError
    raise AttributeError(name)


__all__ = ["REMOTE_ID", "TOKEN_ENV", "URL_ENV", "RemoteEnv", "RemoteEnvError"]
