# Sourced by run.sh and test.sh: `stead setup` creates a Python virtual environment, which on
# Debian needs the python3-venv package (ensurepip). Install it when missing and we are root.
venv_probe=$(mktemp -d)
if ! python3 -m venv "$venv_probe/v" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> installing python3-venv (apt-get install python3-venv)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  else
    echo "error: python3 cannot create virtual environments; install python3-venv (sudo apt-get install python3-venv)" >&2
    exit 1
  fi
fi
rm -rf "$venv_probe"
