# An execution's env_vars (gateway/session/exec.c): set before its code, silently;
# env_restore.py puts the old values back after it.  sandgate sets
# _sandgate_env_new ({name: value}) on the line before this text.
import os as _os
_sandgate_env_saved = {k: _os.environ.get(k) for k in _sandgate_env_new}
_os.environ.update(_sandgate_env_new)
del _os, _sandgate_env_new
