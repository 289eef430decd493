#!/usr/bin/env bash
# Fetch real brain MRI volumes from package registries into datasets/real/ (gitignored).
#
#   mni152-2009/  MNI ICBM152 2009a symmetric T1 template + grey/white-matter probability maps,
#                 unpacked from the `nilearn` wheel on PyPI (nilearn/datasets/data/).
#   colin27/      Colin27 T1 (ch2), its skull-stripped brain (ch2bet) and the AAL atlas,
#                 unpacked from Debian's `mricron-data` package (usr/share/mricron/templates/).
#
# Usage: scripts/fetch-real-data.sh [--dest DIR] [--force]
#   --dest DIR   where to put the files (default: <repo>/datasets/real)
#   --force      fetch again even if the files are already there
# Environment: NILEARN_SPEC (default "nilearn"; e.g. "nilearn==0.14.1" to pin a version),
#              PYTHON (default python3).
#
# Needs: python3 with pip, apt-get and dpkg (Debian/Ubuntu), unzip, gzip. Idempotent: a source
# whose files are all present is skipped. See datasets/README.md for licences and citations.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo/datasets/real"
force=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dest) dest="${2:?--dest needs a folder}"; shift 2 ;;
        --force) force=1; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

PYTHON="${PYTHON:-python3}"
NILEARN_SPEC="${NILEARN_SPEC:-nilearn}"
MNI_FILES=(
    mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz
    mni_icbm152_gm_tal_nlin_sym_09a_converted.nii.gz
    mni_icbm152_wm_tal_nlin_sym_09a_converted.nii.gz
)
COLIN_FILES=(ch2.nii.gz ch2bet.nii.gz aal.nii.gz aal.nii.txt)

log() { echo "[fetch-real-data] $*"; }
die() { echo "[fetch-real-data] error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; $2"; }

# True when every named file exists (non-empty) in folder $1.
have_all() {
    local dir="$1"; shift
    local f
    for f in "$@"; do [[ -s "$dir/$f" ]] || return 1; done
}

# Checks gzip integrity of the .gz files among the named files in folder $1.
check_gz() {
    local dir="$1"; shift
    local f
    for f in "$@"; do
        [[ "$f" == *.gz ]] || continue
        gzip -t "$dir/$f" || die "$dir/$f is not a valid gzip file"
    done
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/medddpm-fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest"

# ---------------------------------------------------------------- MNI152 2009 (nilearn wheel)
mni="$dest/mni152-2009"
if [[ $force -eq 0 ]] && have_all "$mni" "${MNI_FILES[@]}"; then
    log "MNI152 2009: already present in $mni (use --force to fetch again)"
else
    need unzip "install it (apt-get install unzip)"
    "$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip; install python3-pip"
    log "MNI152 2009: downloading the $NILEARN_SPEC wheel from PyPI"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$tmp/wheel" "$NILEARN_SPEC" || die "pip download $NILEARN_SPEC failed (network? proxy?)"
    wheel="$(ls "$tmp"/wheel/nilearn-*.whl 2>/dev/null | head -n 1 || true)"
    [[ -n "$wheel" ]] || die "pip produced no nilearn wheel in $tmp/wheel"
    log "MNI152 2009: unpacking $(basename "$wheel")"
    members=()
    for f in "${MNI_FILES[@]}"; do members+=("nilearn/datasets/data/$f"); done
    unzip -q -o "$wheel" "${members[@]}" 'nilearn-*.dist-info/licenses/LICENSE' -d "$tmp/nl" \
        || die "$(basename "$wheel") lacks the expected files: ${MNI_FILES[*]}"
    check_gz "$tmp/nl/nilearn/datasets/data" "${MNI_FILES[@]}"
    mkdir -p "$mni"
    for f in "${MNI_FILES[@]}"; do
        cp "$tmp/nl/nilearn/datasets/data/$f" "$mni/$f.part" && mv "$mni/$f.part" "$mni/$f"
    done
    cp "$tmp"/nl/nilearn-*.dist-info/licenses/LICENSE "$mni/LICENSE.nilearn"
    echo "$(basename "$wheel")" >"$mni/SOURCE"
fi

# ---------------------------------------------------------------- Colin27 (Debian mricron-data)
colin="$dest/colin27"
if [[ $force -eq 0 ]] && have_all "$colin" "${COLIN_FILES[@]}"; then
    log "Colin27: already present in $colin (use --force to fetch again)"
else
    need apt-get "this part needs a Debian/Ubuntu system (or fetch mricron-data by hand)"
    need dpkg "this part needs a Debian/Ubuntu system"
    if ! apt-cache show mricron-data >/dev/null 2>&1; then
        if [[ "$(id -u)" -eq 0 ]]; then
            log "Colin27: mricron-data not in the package lists; running apt-get update"
            apt-get update -qq || die "apt-get update failed"
        else
            die "mricron-data is not in the package lists; run 'sudo apt-get update' (and enable the main component), then retry"
        fi
    fi
    log "Colin27: downloading mricron-data with apt-get download"
    # apt-get download writes into the current folder; as root it warns that the _apt user
    # cannot write there, which is harmless.
    mkdir -p "$tmp/deb"
    (cd "$tmp/deb" && apt-get download -qq mricron-data 2>&1 | grep -v 'unsandboxed' || true)
    deb="$(ls "$tmp"/deb/mricron-data_*.deb 2>/dev/null | head -n 1 || true)"
    [[ -n "$deb" ]] || die "apt-get download mricron-data produced no .deb"
    log "Colin27: unpacking $(basename "$deb")"
    dpkg -x "$deb" "$tmp/x"
    src="$tmp/x/usr/share/mricron/templates"
    have_all "$src" "${COLIN_FILES[@]}" || die "$(basename "$deb") lacks ${COLIN_FILES[*]} under usr/share/mricron/templates"
    check_gz "$src" "${COLIN_FILES[@]}"
    mkdir -p "$colin"
    for f in "${COLIN_FILES[@]}"; do
        cp "$src/$f" "$colin/$f.part" && mv "$colin/$f.part" "$colin/$f"
    done
    cp "$tmp/x/usr/share/doc/mricron-data/copyright" "$colin/COPYRIGHT.debian"
    echo "$(basename "$deb")" >"$colin/SOURCE"
fi

log "done. Files:"
for f in "${MNI_FILES[@]}"; do echo "  $mni/$f"; done
for f in "${COLIN_FILES[@]}"; do echo "  $colin/$f"; done
