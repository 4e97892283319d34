"""Errors raised by skyrl_gym. Every message names the env id, row or field at fault."""


class Error(Exception):
    """Base class of every skyrl_gym error."""


class RegistrationError(Error):
    """An env could not be registered (duplicate id, bad entry point, bad version)."""


class UnregisteredEnv(Error):
    """No env is registered under the requested id."""


class EnvCreationError(Error):
    """The entry point of a registered env failed or returned something that is not an Env."""


class DataError(Error, ValueError):
    """A dataset row is malformed; the message names the row number and the field."""


class EnvConfigError(Error, ValueError):
    """An ``env_config`` value the env refuses; the message names the env, the key and the value. Also a
    ``ValueError``, as these were before."""


class MissingRewardSpec(DataError, AssertionError):
    """A row lacks ``reward_spec`` or its ``ground_truth``. Also an ``AssertionError``, as SkyRL-gym's envs
    raise one (``assert "reward_spec" in extras, "reward_spec field is required"``)."""


class ToolError(Error):
    """A tool group or tool is misdefined (duplicate tool names, unknown tool)."""


def refused_keyword(error: TypeError, func: object) -> "tuple[str, list[str]] | None":
    """The keyword ``func`` refused in ``error`` ("unexpected keyword argument 'x'") and the names it takes, for a
    message that says what was meant; None for another TypeError or a function whose signature cannot be read."""
    import inspect
    import re

    refused = re.search(r"unexpected keyword argument '([^']+)'", str(error))
    if refused is None:
        return None
    try:
        parameters = inspect.signature(func).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if refused.group(1) in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None  # it takes that keyword, or any: the refusal came from a call inside it
    return refused.group(1), list(parameters)


def keyword_hint(error: TypeError, func: object) -> str:
    """``; did you mean 'extras'?`` for a misspelt keyword ``func`` refused ('' when none is close)."""
    import difflib

    found = refused_keyword(error, func)
    close = difflib.get_close_matches(found[0], found[1], n=1, cutoff=0.6) if found else []
    return f"; did you mean {close[0]!r}?" if close else ""
