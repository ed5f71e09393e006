# Sourced by run.sh and test.sh before cargo builds: the vector index (USearch, crate
# `usearch` of stead-vectors) is C++ compiled by its build script, so a C++ compiler is needed.
# Install Debian's g++ when missing and we are root.
if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> installing a C++ compiler (apt-get install g++)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  else
    echo "error: a C++ compiler is needed to build Stead's vector index (USearch); install g++ (sudo apt-get install g++)" >&2
    exit 1
  fi
fi
