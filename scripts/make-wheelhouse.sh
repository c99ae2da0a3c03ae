#!/usr/bin/env bash
# Fill ./.wheels with every runtime dependency of batchd as binary wheels for CPython 3.12 on
# x86-64 Linux, so that scripts/gpu-check.sh can install the project on a machine with no
# network (`pip install --no-index --find-links .wheels`), e.g. the device machine:
#   scripts/make-wheelhouse.sh && <run with carry: [".wheels"]> scripts/gpu-check.sh
# .wheels/ must stay out of git (.gitignore or .git/info/exclude).
# Env: PYTHON (a python with pip, default python3), PYVER (default 3.12), DEST (default .wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PYVER=${PYVER:-3.12}
DEST=${DEST:-.wheels}
abi="cp${PYVER/./}"
mkdir -p "$DEST"
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_5_x86_64; do
    plat+=(--platform "$p")
done
t0=$(date +%s)
# the project's dependencies (pyproject.toml [project].dependencies) and what they pull in;
# pip resolves the transitive ones (greenlet, typing-extensions, Mako, MarkupSafe, tzlocal ...)
"$PYTHON" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --abi "$abi" --abi abi3 --abi none "${plat[@]}" --dest "$DEST" \
    'click>=8.1' 'SQLAlchemy>=2.0' 'alembic>=1.12' 'APScheduler>=3.10,<4' 'psutil>=5.9' \
    'nvidia-ml-py>=12.535' 'psycopg[binary]>=3.1' 'setuptools>=68' wheel
echo "wheelhouse $DEST: $(ls "$DEST" | wc -l) wheels, $(du -sh "$DEST" | cut -f1), $(( $(date +%s) - t0 )) s"
ls "$DEST"
