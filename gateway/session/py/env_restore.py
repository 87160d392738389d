# After an execution with env_vars (gateway/session/exec.c): the values env_set.py
# saved come back; a variable that was not set is removed again.
import os as _os
for _k, _v in _sandgate_env_saved.items():
    if _v is None: _os.environ.pop(_k, None)
    else: _os.environ[_k] = _v
del _os, _k, _v, _sandgate_env_saved
