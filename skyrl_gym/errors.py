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


class MissingRewardSpec(DataError, AssertionError):
    """A row lacks ``reward_spec`` or its ``ground_truth``. Also an ``AssertionError``, as SkyRL-gym's envs
    raise one (``assert "reward_spec" in extras, "reward_spec field is required"``)."""


class ToolError(Error):
    """A tool group or tool is misdefined (duplicate tool names, unknown tool)."""
