# A REST context's working directory (POST /contexts {cwd}, gateway/rest/rest.c):
# made if missing, then the kernel's cwd.  sandgate sets _sandgate_cwd on the
# line before this text.
import os as _os
_os.makedirs(_sandgate_cwd, exist_ok=True)
_os.chdir(_sandgate_cwd)
del _os, _sandgate_cwd
