#!/usr/bin/env bash
# Builds, on a machine that reaches a package index, .site.tar.gz: the two folders that benchmarks/gpu_check.sh
# unpacks and puts on PYTHONPATH on a device machine that reaches none (its image already holds JAX, Flax, Optax,
# chex, absl, PyTorch, TensorBoard, NumPy and SciPy):
#   site/           the project's dependencies the image lacks: EnvPool 1.2 (its Atari and classic-control extensions
#                   and the Atari ROMs only, to stay inside the device's 64 MiB transfer), Gymnasium, gymnax, rlax
#                   and what they import;
#   site-cleanrl/   CleanRL's ppo_atari_envpool_xla_jax_scan.py at a fixed commit, with the EnvPool and gym it was
#                   written for: EnvPool 0.9.0 (the last with gym's four-value step, and built for JAX's FFI) and
#                   gym 0.23.1, and tyro for its flags. The script as published stops on today's JAX and Flax at
#                   two API changes (benchmarks/cleanrl_jax.py: `compat_source`); `..._compat.py` has the two
#                   changes, `compat.diff` shows them, and the original stays beside them.
# Unpacked they hold about 60 MiB, more than the device's 64 MiB transfer beside the repository; compressed, 17 MiB.
# The archive is git-ignored; the device call names it in `carry`. PY picks the target Python (the device image's is
# 3.12; PY=3.11 builds a pair this machine can import, for `DRY=1 bash benchmarks/gpu_check.sh`). CLEANRL_REPO is a
# clone of https://github.com/vwxyzjn/cleanrl (or its bare mirror) holding CLEANRL_COMMIT.
set -euo pipefail
PY=${PY:-3.12}
ARCHIVE=${ARCHIVE:-.site.tar.gz}
CLEANRL_REPO=${CLEANRL_REPO:-/work/.mirror/vwxyzjn+cleanrl/repo}
CLEANRL_COMMIT=${CLEANRL_COMMIT:-fe8d8a03c41a7ef5b523e2e354bd01c363e786bb}
CLEANRL_SCRIPT=cleanrl/ppo_atari_envpool_xla_jax_scan.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SITE=$tmp/out/site
PEER_SITE=$tmp/out/site-cleanrl

download() {  # download DEST SPEC...: binary wheels for the target Python, without their dependencies
  local dest=$1
  shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" "$@"
}
unpack() {  # unpack WHEEL_DIR SITE: every wheel's files into SITE, as pip --target would lay them out
  local wheel
  mkdir -p "$2"
  for wheel in "$1"/*.whl; do python3 -m zipfile -e "$wheel" "$2"; done
}
prune_envpool() {  # keep EnvPool's Python side, the Atari and classic-control extensions and the Atari ROMs
  local site=$1 family
  for family in "$site"/envpool/*/; do
    case $(basename "$family") in
      python | atari | classic_control) ;;
      *)  # EnvPool imports every family's registration at import: each module stays, empty, registering nothing
        find "$family" -type f ! -name '*.py' -delete
        find "$family" -name '*.py' -exec sh -c \
          'echo "\"\"\"Not carried to the device (benchmarks/gpu_site.sh).\"\"\"" > "$1"' _ {} \; ;;
    esac
  done
  rm -rf "$site"/envpool.libs/lib[!EGO]*  # the kept extensions link none of the bundled libraries but OpenGL's
  if [[ -d $site/envpool_assets ]]; then
    find "$site/envpool_assets" -mindepth 1 -maxdepth 1 -type d ! -name atari -exec rm -rf {} +
  fi
}

# .site: the versions the project's tests pass with (pyproject.toml's ranges).
mkdir -p "$tmp/site"
download "$tmp/site" envpool==1.2.5 envpool-assets==0.3.0 gymnasium==1.3.0 farama-notifications==0.0.6 \
  gymnax==1.0.1 rlax==0.1.9 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 decorator==5.2.1 gast==0.7.0 \
  dm-env==1.6 dm-tree==0.1.10 optree==0.20.0 tensorboardx==2.6.5
unpack "$tmp/site" "$SITE"
prune_envpool "$SITE"
rm -rf "$SITE"/tensorflow_probability/python/experimental "$SITE"/tensorflow_probability/substrates/numpy

# .site-cleanrl: the peer's own script and the packages it imports that .site does not hold at its version.
mkdir -p "$tmp/peer"
download "$tmp/peer" envpool==0.9.0 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 shtab==1.13.0 \
  gym-notices==0.1.0
python3 -m pip wheel -q --no-deps -w "$tmp/peer" gym==0.23.1  # gym 0.23.1 is published as a source archive only
unpack "$tmp/peer" "$PEER_SITE"
prune_envpool "$PEER_SITE"
if [[ -d $CLEANRL_REPO/.git ]]; then CLEANRL_REPO=$CLEANRL_REPO/.git; fi
git --git-dir="$CLEANRL_REPO" show "$CLEANRL_COMMIT:$CLEANRL_SCRIPT" > "$PEER_SITE/$(basename "$CLEANRL_SCRIPT")"
echo "$CLEANRL_COMMIT" > "$PEER_SITE/CLEANRL_COMMIT"
script=$PEER_SITE/$(basename "$CLEANRL_SCRIPT")
python3 -m benchmarks.cleanrl_jax --write_compat="$script"
(cd "$PEER_SITE" && diff -u "$(basename "$script")" "$(basename "${script%.py}_compat.py")" > compat.diff) || true
du -sh "$SITE" "$PEER_SITE"
tar czf "$ARCHIVE.tmp" -C "$tmp/out" site site-cleanrl
mv "$ARCHIVE.tmp" "$ARCHIVE"
du -h "$ARCHIVE"
