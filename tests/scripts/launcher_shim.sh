#!/bin/sh
# A launcher as pyenv's shims are: a shell that runs helpers (readlink, dirname, a nested shell)
# before it execs Python. argv: PYTHON ARGS...
py=$1
shift
for i in 1 2 3 4 5 6; do
    readlink -f "$0" > /dev/null
    dirname "$0" > /dev/null
done
sh -c 'true; true'
exec "$py" "$@"
