#!/usr/bin/env bash
# derive.sh - print mlprof's per-version CPython layout table (expected.txt).
#
# For every CPython found, compile derive.c against that interpreter's headers (gcc,
# Py_BUILD_CORE) and print its `name=value` lines under a `[3.X]` header (`[3.Xt]` for a
# free-threaded build). On 3.13+ the values are also compared with what the running
# interpreter publishes in _Py_DebugOffsets (debug_offsets.py); a mismatch is an error.
# For a GIL build of 3.14 or later whose headers serve both builds (Debian's do), the
# free-threaded layout of the same version is derived too, with -DPy_GIL_DISABLED=1: there is
# no such interpreter to run, so those sections are checked against the headers only.
#
# Pythons: $PYTHONS (space-separated python executables) if set, else
# ${PYENV_ROOT:-~/.pyenv}/versions/3.{9..13}.N/bin/python3.X (names with a suffix such as
# 3.13.0t or 3.12.1-debug are skipped), then the interpreters under target/ that
# scripts/pythons.sh prepares (target/cpython-3.14, -3.15, -3.13t), when they are there.
#
# Usage:
#   derive.sh            print the table (this is how expected.txt was made:
#                        derive.sh > expected.txt)
#   derive.sh --check    compare each derived section with the same section of expected.txt;
#                        exit 1 on any difference or on a version expected.txt does not have.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
expected="$here/expected.txt"
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pythons=()
if [[ -n "${PYTHONS:-}" ]]; then
  read -r -a pythons <<<"$PYTHONS"
else
  root="${PYENV_ROOT:-$HOME/.pyenv}/versions"
  for minor in 9 10 11 12 13; do
    for d in "$root"/3."$minor".*; do
      [[ -d "$d" ]] || continue
      if [[ ! "$(basename "$d")" =~ ^3\.$minor\.[0-9]+$ ]]; then
        echo "derive.sh: skipping $d (not a plain release build name)" >&2
        continue
      fi
      if [[ -x "$d/bin/python3.$minor" ]]; then
        pythons+=("$d/bin/python3.$minor")
      fi
    done
  done
  for exe in "$top"/target/cpython-3.13t/bin/python3.13t "$top"/target/cpython-3.14/usr/bin/python3.14 \
      "$top"/target/cpython-3.15/usr/bin/python3.15; do
    [[ -x "$exe" ]] && pythons+=("$exe")
  done
fi
if [[ ${#pythons[@]} -eq 0 ]]; then
  echo "derive.sh: no CPython found (set PYTHONS)" >&2
  exit 2
fi

# derive_one PYTHON OUTFILE [ft]: write "[3.X]" + derive.c output to OUTFILE; with `ft`, the
# free-threaded layout of the same headers (no interpreter to check it against).
derive_one() {
  local py=$1 out=$2 headers_ft=${3:-} info inc mm gil dbg full name flags=()
  info=$("$py" -c 'import sys, sysconfig
print("%d.%d" % sys.version_info[:2])
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("Py_GIL_DISABLED") or 0)
print(sysconfig.get_config_var("Py_DEBUG") or 0)
print(sys.version.split()[0])') || {
    echo "derive.sh: cannot run $py" >&2
    return 1
  }
  { read -r mm; read -r inc; read -r gil; read -r dbg; read -r full; } <<<"$info"
  if [[ "$dbg" != 0 ]]; then
    echo "derive.sh: $py ($full) is a debug build: refused" >&2
    return 1
  fi
  name=$mm
  [[ "$gil" != 0 ]] && name="${mm}t"
  if [[ -n "$headers_ft" ]]; then
    name="${mm}t"
    flags=(-DPy_GIL_DISABLED=1)
  fi
  if [[ ! -f "$inc/Python.h" ]]; then
    echo "derive.sh: $full: no headers at $inc (Debian: libpython$mm-dev)" >&2
    return 1
  fi
  echo "derive.sh: $name ($full)  $py  headers=$inc ${flags[*]}" >&2
  # -I$inc/..: Debian's multiarch pyconfig.h (<x86_64-linux-gnu/python3.X/pyconfig.h>)
  gcc -O0 -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
    "${flags[@]}" -I"$inc" -I"$inc/.." -o "$tmp/derive-$name" "$here/derive.c" || {
    echo "derive.sh: compiling derive.c against $inc failed" >&2
    return 1
  }
  { echo "[$name]" && "$tmp/derive-$name"; } >"$out" || return 1
  if ! grep -qx "version=$mm" "$out"; then
    echo "derive.sh: $py reports $mm but its headers say $(grep '^version=' "$out")" >&2
    return 1
  fi
  [[ -n "$headers_ft" ]] && return 0
  # 3.13+: cross-check against the interpreter's own _Py_DebugOffsets.
  if [[ "${mm#3.}" -ge 13 ]]; then
    "$py" "$here/debug_offsets.py" "$out" >"$tmp/dbg-raw-$name" || {
      echo "derive.sh: debug_offsets.py failed under $py" >&2
      return 1
    }
    grep -v '^#' "$tmp/dbg-raw-$name" >"$tmp/dbg-$name"
    local n=0 field val want
    while IFS='=' read -r field val; do
      want=$(grep -m1 "^$field=" "$out" | cut -d= -f2)
      if [[ "$want" != "$val" ]]; then
        echo "derive.sh: $full: $field: headers say '$want', _Py_DebugOffsets says '$val'" >&2
        return 1
      fi
      n=$((n + 1))
    done <"$tmp/dbg-$name"
    echo "derive.sh: $name ($full): $n values agree with _Py_DebugOffsets" >&2
  fi
}

# section FILE NAME: print the body of section [NAME] of FILE.
section() {
  awk -v want="[$2]" '
    /^\[/ { on = ($0 == want); next }
    on && NF { print }' "$1"
}

jobs=()
for py in "${pythons[@]}"; do
  jobs+=("$py:")
  minor=$("$py" -c 'import sys, sysconfig; print(sys.version_info[1] if not sysconfig.get_config_var("Py_GIL_DISABLED") else 0)' 2>/dev/null || echo 0)
  [[ "$minor" -ge 14 ]] && jobs+=("$py:ft")
done

status=0
i=0
if [[ $check -eq 0 ]]; then
  echo "# CPython struct offsets for mlprof (x86_64, non-debug builds; 3.Xt: free-threaded)."
  echo "# Generated by pyframes/layouts-derivation/derive.sh; regenerate, do not edit."
  echo "# Must match pyframes/src/layouts.rs (its tests read this file)."
  echo
fi
for job in "${jobs[@]}"; do
  i=$((i + 1))
  py=${job%:*}
  if ! derive_one "$py" "$tmp/out-$i" "${job##*:}"; then
    status=1
    continue
  fi
  if [[ $check -eq 0 ]]; then
    cat "$tmp/out-$i"
    echo
    continue
  fi
  name=$(head -1 "$tmp/out-$i" | tr -d '[]')
  if ! grep -qx "\[$name\]" "$expected"; then
    echo "derive.sh --check: $name is not in expected.txt (new version? see docs/design/python-layouts.md)" >&2
    status=1
    continue
  fi
  if diff -u --label "expected.txt [$name]" --label "derived [$name] ($py)" \
      <(section "$expected" "$name") <(section "$tmp/out-$i" "$name") >&2; then
    echo "derive.sh --check: $name OK" >&2
  else
    status=1
  fi
done
if [[ $check -eq 1 && $status -ne 0 ]]; then
  echo "derive.sh --check: FAILED" >&2
fi
exit $status
