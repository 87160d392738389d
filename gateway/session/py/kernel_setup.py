# A Jupyter kernel's env and path (POST /api/kernels, /api/sessions;
# gateway/jupyter/jupyter.c): the variables are set, and the kernel moves to the
# notebook's directory under /home/user when it exists.  sandgate sets
# _sandgate_env ({name: value}), _sandgate_path and _sandgate_use_path on the
# lines before this text.
import os as _os
_os.environ.update(_sandgate_env)
_p = _os.path.join('/home/user', _sandgate_path)
if _sandgate_use_path and _os.path.isdir(_p): _os.chdir(_p)
del _os, _p, _sandgate_env, _sandgate_path, _sandgate_use_path
