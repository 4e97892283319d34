"""The program that runs one REPL cell inside a sandbox (standard library only; see :mod:`.repl`).

Files it reads from its work folder:

* ``cell.py``: the model's code;
* ``host.pkl``: what the host sends (pickled by the host, trusted): the context payloads, the custom tool
  values, the names of the functions that run on the host, the answers to host calls made so far in
  this cell, and the builtins to block;
* ``state.pkl`` (after the first cell): the variables the previous cells left, as this program pickled
  them. It is read back only here, inside the sandbox: the host carries it as opaque bytes.

Files it writes: ``result.json`` (status, final answer, variable types and literal values, or the host
call it needs) and, when the cell finished, ``state.pkl``. The cell's stdout and stderr are the run's.

A call of a host function (``llm_query``, a custom tool, ...) whose answer is not yet in ``host.pkl``
stops the cell (``_HostCall``); the host computes the answer and runs the cell again from the same
starting state, with the answers so far, so the cell is replayed up to that call and goes on.
"""

PROGRAM = r'''
import ast, builtins, hashlib, io, json, marshal, pickle, sys, traceback, types

with open("host.pkl", "rb") as _f:
    HOST = pickle.load(_f)
with open("cell.py", "r", encoding="utf-8") as _f:
    CELL = _f.read()


def _item(item):
    blob, text = item
    if blob is not None:
        try:
            return pickle.loads(blob)
        except Exception:
            pass
    return text


_builtins = dict(vars(builtins))
for _name in HOST["blocked"]:
    _builtins[_name] = None
NS = {"__name__": "__main__", "__builtins__": _builtins}
HOST_FUNCTIONS = set(HOST["callables"])
RESERVED = set(HOST["reserved"])
CONTEXT_NAMES = set(HOST["contexts"]) | {"context"}
NOT_STATE = RESERVED | HOST_FUNCTIONS | CONTEXT_NAMES | {"FINAL_VAR", "SHOW_VARS"}
ANSWERS = HOST["answers"]


# ----- the state: user functions and classes are pickled by value ------------------------------------
def _make_function(code, name, qualname, defaults, kwdefaults, closure, attrs, doc):
    cells = None
    if closure is not None:
        cells = tuple(types.CellType(value) if full else types.CellType() for full, value in closure)
    function = types.FunctionType(marshal.loads(code), NS, name, defaults, cells)
    function.__qualname__ = qualname
    function.__kwdefaults__ = kwdefaults
    function.__doc__ = doc
    function.__dict__.update(attrs)
    return function


def _make_class(metaclass, name, bases, attrs):
    return metaclass(name, bases, attrs)


def _cell_contents(cell):
    try:
        return (True, cell.cell_contents)
    except ValueError:
        return (False, None)


_PROGRAM_MODULE = sys.modules[__name__]


class _StatePickler(pickle.Pickler):
    def reducer_override(self, obj):
        kind = type(obj)
        if kind is types.FunctionType and obj.__globals__ is NS:
            closure = None if obj.__closure__ is None else [_cell_contents(c) for c in obj.__closure__]
            return _make_function, (marshal.dumps(obj.__code__), obj.__name__, obj.__qualname__, obj.__defaults__,
                                    obj.__kwdefaults__, closure, dict(obj.__dict__), obj.__doc__)
        if isinstance(obj, type) and obj.__module__ == "__main__" and getattr(_PROGRAM_MODULE, obj.__qualname__, None) is not obj:
            attrs = {k: v for k, v in vars(obj).items() if k not in ("__dict__", "__weakref__")}
            return _make_class, (type(obj), obj.__name__, obj.__bases__, attrs)
        if kind is property:
            return property, (obj.fget, obj.fset, obj.fdel, obj.__doc__)
        if kind is staticmethod or kind is classmethod:
            return kind, (obj.__func__,)
        return NotImplemented


def _dumps(value):
    buffer = io.BytesIO()
    _StatePickler(buffer, protocol=4).dump(value)
    return buffer.getvalue()


def _load_state():
    try:
        with open("state.pkl", "rb") as f:
            saved = pickle.load(f)
    except FileNotFoundError:
        return
    if "whole" in saved:
        NS.update(pickle.loads(saved["whole"]))
    for name, blob in saved.get("each", {}).items():
        NS[name] = pickle.loads(blob)


def _save_state():
    names = [k for k in NS if not k.startswith("_") and k not in NOT_STATE]
    state = {k: NS[k] for k in names}
    dropped = []
    try:
        saved = {"whole": _dumps(state)}
    except BaseException:
        saved = {"each": {}}
        for name in names:
            try:
                saved["each"][name] = _dumps(NS[name])
            except BaseException as exc:
                dropped.append("%s (%s: %s)" % (name, type(exc).__name__, str(exc)[:100]))
    blob = pickle.dumps(saved, protocol=4)
    with open("state.pkl", "wb") as f:
        f.write(blob)
    return names, dropped, len(blob), hashlib.sha256(blob).hexdigest()


# ----- scaffold: FINAL_VAR and SHOW_VARS run here, host functions are stubs -----------------------------
_FINAL = []


def _user_names():
    return [k for k in NS if not k.startswith("_") and k not in NOT_STATE and k != "__builtins__"]


def FINAL_VAR(variable_name):
    if not isinstance(variable_name, str):
        _FINAL.append(str(variable_name))
        return _FINAL[-1]
    name = variable_name.strip().strip("\"'")
    if name in NS:
        _FINAL.append(str(NS[name]))
        return _FINAL[-1]
    names = _user_names()
    if names:
        message = ("Error: Variable '%s' not found. Available variables: %s. You must create and assign a variable "
                   "BEFORE calling FINAL_VAR on it." % (name, names))
    else:
        message = ("Error: Variable '%s' not found. No variables have been created yet. You must create and assign "
                   "a variable in a ```repl``` block BEFORE calling FINAL_VAR on it." % name)
    print(message)
    return message


def SHOW_VARS():
    found = {k: type(NS[k]).__name__ for k in _user_names()}
    if not found:
        return "No variables created yet. Use ```repl``` blocks to create variables."
    return "Available variables: %s" % found


class _HostCall(BaseException):
    """Stops the cell until the host has answered a call (never an Exception, so `except Exception` lets it by)."""


_CALLS = [0]
_PENDING = []


def _safe_repr(value):
    try:
        return repr(value)
    except BaseException as exc:
        return "<unrepresentable %s: %s>" % (type(value).__name__, exc)


def _host_function(name):
    def call(*args, **kwargs):
        if _PENDING:
            raise _HostCall()
        index = _CALLS[0]
        _CALLS[0] += 1
        key = _safe_repr((name, args, sorted(kwargs.items())))
        if index < len(ANSWERS) and ANSWERS[index][0] == key:
            return _item(ANSWERS[index][1])
        _PENDING.append({"index": index, "name": name, "key": key, "args": [_safe_repr(a) for a in args],
                         "kwargs": {k: _safe_repr(v) for k, v in kwargs.items()}})
        raise _HostCall()
    call.__name__ = call.__qualname__ = name
    return call


def _bind_scaffold():
    NS["FINAL_VAR"] = FINAL_VAR
    NS["SHOW_VARS"] = SHOW_VARS
    for name in HOST_FUNCTIONS:
        NS[name] = _host_function(name)
    for name, item in HOST["contexts"].items():
        NS[name] = _item(item)
    if "context_0" in NS:
        NS["context"] = NS["context_0"]


# ----- run the cell -----------------------------------------------------------------------------------
def _literal(value):
    if type(value) not in (str, int, float, bool, list, dict, tuple, set, frozenset, bytes, complex, type(None)):
        return None
    if hasattr(value, "__len__") and len(value) > HOST["max_literal_chars"]:
        return None  # too long to send whatever its repr: skip the repr
    text = _safe_repr(value)
    return text if len(text) <= HOST["max_literal_chars"] else None


def _finish(status, **fields):
    fields["status"] = status
    fields["final_answer"] = _FINAL[-1] if _FINAL else None
    with open("result.json", "w", encoding="utf-8") as f:
        json.dump(fields, f)


_load_state()
for _name, _value in HOST["values"].items():
    if _name not in NS:
        NS[_name] = _item(_value)
_bind_scaffold()
try:
    exec(compile(CELL, "<string>", "exec"), NS)
    _error = None
except _HostCall:
    _error = None
except BaseException as _exc:
    _error = _exc
sys.stdout.flush()
if _PENDING:
    _finish("call", call=_PENDING[0])
elif _error is not None:
    _frames = _error.__traceback__
    while _frames is not None and _frames.tb_frame.f_code.co_filename != "<string>":
        _frames = _frames.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(_error), _error, _frames)))
    _finish("error")
else:
    _bind_scaffold()  # names the cell rebound (llm_query = ...) are not kept
    _names, _dropped, _size, _digest = _save_state()
    _vars = {k: {"type": type(NS[k]).__name__, "literal": _literal(NS[k])} for k in _names}
    _finish("done", vars=_vars, dropped=_dropped, state_bytes=_size, state_sha256=_digest)
'''
