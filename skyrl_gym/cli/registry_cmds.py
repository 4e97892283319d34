"""``skyrl-gym list`` (every registered env) and ``skyrl-gym info ID`` (one env in detail)."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.cli._io import UsageError, error, load_row, to_json


def register(subparsers: argparse._SubParsersAction) -> None:
    list_parser = subparsers.add_parser("list", help="list the registered envs: id, description, provider")
    list_parser.add_argument("--provider", help="only envs of this provider (package name)")
    list_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    list_parser.add_argument("--markdown", action="store_true",
                             help="print the catalogue page (docs/catalogue.md) of the envs skyrl-gym provides")
    list_parser.set_defaults(func=run_list)

    info_parser = subparsers.add_parser("info", help="show one env: spec, entry point, docs, README, tools")
    info_parser.add_argument("env_id", metavar="ID")
    info_parser.add_argument("--row", metavar="FILE", help="a rows file to build the env from (for tool schemas)")
    info_parser.add_argument("--index", type=int, default=0, help="row of --row to use (default 0)")
    info_parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    info_parser.set_defaults(func=run_info)


# ----- list ---------------------------------------------------------------------------------------


def env_table(provider: Optional[str] = None) -> List[Dict[str, str]]:
    import skyrl_gym

    rows = []
    for env_id, env_spec in sorted(skyrl_gym.registry.items()):
        if provider and env_spec.provider != provider:
            continue
        rows.append({"id": env_id, "description": env_spec.get_description(), "provider": env_spec.provider})
    return rows


def run_list(args: argparse.Namespace) -> int:
    import skyrl_gym

    if args.markdown:
        from skyrl_gym.catalogue import markdown

        print(markdown(), end="")
        return 0
    rows = env_table(args.provider)
    if args.provider and not rows:  # a misspelt provider: say which there are, not an empty table
        providers = sorted({env_spec.provider for env_spec in skyrl_gym.registry.values()})
        print(f"error: no env is provided by {args.provider!r}; the providers: {', '.join(providers)}",
              file=sys.stderr)
        return 2
    plugin_errors = dict(skyrl_gym.registry.plugin_errors)
    if args.json:
        print(to_json({"envs": rows, "plugin_errors": plugin_errors}, indent=2))
        return 0
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max([len(r["id"]) for r in rows] + [2])
        provider_width = max([len(r["provider"]) for r in rows] + [8])
        print(f"{'ID':{width}}  {'PROVIDER':{provider_width}}  DESCRIPTION")
        for r in rows:
            print(f"{r['id']:{width}}  {r['provider']:{provider_width}}  {r['description']}")
    else:
        table = Table(title=f"skyrl-gym environments ({len(rows)})")
        table.add_column("id", style="bold", no_wrap=True)
        table.add_column("description")
        table.add_column("provider", no_wrap=True)
        for r in rows:
            table.add_row(r["id"], r["description"], r["provider"])
        Console(width=None if sys.stdout.isatty() else 160).print(table)
    for name, message in sorted(plugin_errors.items()):
        print(f"warning: plugin {name} failed to load: {message}", file=sys.stderr)
    return 0


# ----- info ---------------------------------------------------------------------------------------


def _entry_point_name(entry_point: Any) -> str:
    if isinstance(entry_point, str) or entry_point is None:
        return str(entry_point)
    return f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', repr(entry_point))}"


def _readme_of(creator: Any) -> Optional[Path]:
    """The README.md next to the module that defines the env (``envs/<id>/README.md``), else the one of the
    project around its package (the folder above it holding ``pyproject.toml``: where ``skyrl-gym init`` writes
    it, read from an editable install)."""
    try:
        source = inspect.getsourcefile(getattr(creator, "func", creator))  # a functools.partial's class
    except TypeError:
        return None
    if source is None:
        return None
    folder = Path(source).resolve().parent
    project = [folder.parent] if (folder.parent / "pyproject.toml").exists() else []
    for candidate in [folder, *project]:
        for name in ("README.md", "readme.md", "README.rst"):
            if (candidate / name).exists():
                return candidate / name
    return None


def _gymnasium_id(env_id: str) -> str:
    """The env's Gymnasium id; Gymnasium names allow no '/', so ``games/nim`` goes through the lazy id."""
    from skyrl_gym.registration import parse_env_id

    name, version = parse_env_id(env_id)
    if "/" in name:
        return f"skyrl_gym/lazy-v0 with env_id={env_id!r} ('/' is not allowed in Gymnasium names)"
    return f"skyrl_gym/{name}-v{version or 0}"


def env_info(env_id: str, row_file: Optional[str] = None, index: int = 0) -> Dict[str, Any]:
    import skyrl_gym

    env_spec = skyrl_gym.spec(env_id)
    info: Dict[str, Any] = {
        "id": env_spec.id,
        "gymnasium_id": _gymnasium_id(env_spec.id),
        "provider": env_spec.provider,
        "entry_point": _entry_point_name(env_spec.entry_point),
        "kwargs": env_spec.kwargs,
        "description": env_spec.get_description(),
    }
    from skyrl_gym import datasets

    info["dataset_builder"] = datasets.builder_name(env_spec.id) if datasets.has_dataset(env_spec.id) else None
    try:
        creator = env_spec.load_entry_point()
    except Exception as exc:
        info["load_error"] = f"{type(exc).__name__}: {exc}"
        return info
    # its own docstring: inspect.getdoc would give a class without one its base class's (BaseTextEnv's)
    own = creator.__dict__.get("__doc__") if isinstance(creator, type) else getattr(creator, "__doc__", None)
    info["docstring"] = inspect.cleandoc(own) if isinstance(own, str) else ""
    readme = _readme_of(creator)
    info["readme"] = str(readme) if readme else None
    from skyrl_gym.registration import declared_config

    info["env_config"] = declared_config(env_spec.id)  # its keys and defaults; None: not declared

    extras: Dict[str, Any] = {}
    if row_file:
        _, extras = load_row(row_file, index)
    else:  # an env that needs a row to be built gets one of its own: a golden case, else one its builder makes
        extras, info["row_source"] = _a_row_of(env_spec.id)
    try:
        with skyrl_gym.make(env_spec.id, env_config={}, extras=extras) as env:
            schemas = env.tool_schemas() if hasattr(env, "tool_schemas") else []
            info["max_turns"] = getattr(env, "max_turns", None)
        info["tool_schemas"] = schemas
    except Exception as exc:
        hint = "" if row_file else " (give a row with --row FILE to build it)"
        info["tool_schemas"] = None
        info["tool_schemas_error"] = f"building the env raised {type(exc).__name__}: {exc}{hint}"
    return info


def _a_row_of(env_id: str) -> Tuple[Dict[str, Any], Optional[str]]:
    """The extras of one row of ``env_id`` (a golden case first: no network, no extra) and where it came from;
    ``({}, None)`` if it has none."""
    from skyrl_gym.checker import BrokenBuilder, NoRowsFor, default_rows, golden_rows
    from skyrl_gym.data import row_extras

    rows, path = golden_rows(env_id)
    source = f"a golden case from {path}"
    if not rows:
        try:
            rows, source, _ = default_rows(env_id, size=1, verify=False)
        except (NoRowsFor, BrokenBuilder):  # `check` names a broken builder; `info` shows what it can
            return {}, None
    return row_extras(dict(rows[0])), source


def run_info(args: argparse.Namespace) -> int:
    from skyrl_gym.errors import UnregisteredEnv

    try:
        info = env_info(args.env_id, args.row, args.index)
    except (UnregisteredEnv, UsageError, FileNotFoundError) as exc:
        error(str(exc))
        return 2
    if args.json:
        print(to_json(info, indent=2))
        return 0
    lines = [
        f"id:           {info['id']}",
        f"gymnasium id: {info['gymnasium_id']}",
        f"provider:     {info['provider']}",
        f"entry point:  {info['entry_point']}",
        f"kwargs:       {to_json(info['kwargs'])}",
        f"description:  {info['description']}",
        "dataset:      " + (f"skyrl_gym.datasets.build_rows({info['id']!r}, ...) via {info['dataset_builder']}"
                            if info["dataset_builder"] else "(no builder; bring your own rows)"),
    ]
    if "load_error" in info:
        lines.append(f"cannot load the entry point: {info['load_error']}")
        print("\n".join(lines))
        return 1
    lines.append(f"README:       {info['readme'] or '(none)'}")
    if info.get("row_source"):
        lines.append(f"built from:   {info['row_source']} (--row FILE gives your own)")
    if info.get("max_turns") is not None:  # a row's own max_turns wins over the env's default
        row_note = " (with that row: a row's max_turns wins)" if info.get("row_source") else ""
        lines.append(f"max_turns:    {info['max_turns']}{row_note}")
    if info["env_config"] is None:
        lines.append("env_config:   (its keys are not declared: config_defaults)")
    elif not info["env_config"]:
        lines.append("env_config:   none (it reads no key)")
    else:
        lines.append("env_config:   " + ", ".join(
            f"{key}={'(unset)' if value is None else to_json(value)}" for key, value in sorted(info["env_config"].items())))
    if info["tool_schemas"] is None:
        lines.append(f"tools:        unknown - {info['tool_schemas_error']}")
    elif not info["tool_schemas"]:
        lines.append("tools:        none")
    else:
        lines.append("tools:")
        for schema in info["tool_schemas"]:
            function = schema.get("function", schema)
            lines.append(f"  - {function.get('name')}: {function.get('description', '')}")
            lines.append(f"    parameters: {to_json(function.get('parameters', {}))}")
    if info["docstring"] and info["docstring"].strip() != str(info["description"]).strip():  # not said twice
        lines.append("")
        lines.append(info["docstring"])
    print("\n".join(lines))
    return 0
