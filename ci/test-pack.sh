#!/usr/bin/env bash
# The relocatable pack (ci/pack.sh) really is self-contained: packs BUILD_DIR with
# --no-cuda-libs into a temporary folder, moves the folder elsewhere, then
#   1. every ELF file in it resolves every library, under the wrappers' environment, either
#      inside the pack or to glibc / the CUDA driver / the CUDA toolkit (left to the host);
#   2. bin/parity --help and a 2-rank `parity check` run from another directory with a bare
#      environment, and a decoy mpirun first on PATH that fails if it is ever started;
#   3. ompi_info reports the moved folder as Open MPI's prefix;
#   4. while a 2-rank job is held up (--inject-stall), mpirun and both ranks are the pack's
#      executables and have mapped only the pack's libraries and glibc's;
#   5. as root, where mount namespaces work: the 2-rank check again with this machine's
#      libraries hidden (only glibc left in /usr/lib/x86_64-linux-gnu) and /etc/openmpi,
#      /usr/share/openmpi gone, i.e. on a host with none of Open MPI, HDF5, OpenBLAS installed.
#      Without root or namespaces this step is reported as not run; 1-4 still decide.
#
# usage: ci/test-pack.sh BUILD_DIR
# Exit status: 0 pass, 1 fail, 77 skip (nothing to pack with: no ompi_info/ldd, not x86_64).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd)
if (($# != 1)); then
    echo "usage: ${0##*/} BUILD_DIR" >&2
    exit 2
fi
build=$1
[ -x "$build/bin/parity" ] || { echo "test-pack: FAIL: $build/bin/parity not found" >&2; exit 1; }
for tool in ldd readelf ompi_info; do
    command -v "$tool" >/dev/null || { echo "test-pack: SKIP: $tool not found, nothing to pack with"; exit 77; }
done
[ "$(uname -m)" = x86_64 ] || { echo "test-pack: SKIP: packs are x86_64 only"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/parity-test-pack.XXXXXX")
bg_pid=
cleanup() {
    if [ -n "$bg_pid" ]; then kill "$bg_pid" 2>/dev/null || true; fi
    rm -rf -- "$tmp"
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP PIPE

failures=0
fail() { echo "test-pack: FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "test-pack: ok [$((SECONDS - started)) s]: $*"; }
started=$SECONDS

# --- pack, then move it: nothing may remember where it was made -------------------------
mkdir -p "$tmp/made" "$tmp/moved-to/x" "$tmp/work"
if ! bash "$HERE/pack.sh" --build "$build" --out "$tmp/made/pack" --no-cuda-libs >"$tmp/pack.log" 2>&1; then
    cat "$tmp/pack.log" >&2
    echo "test-pack: FAIL: ci/pack.sh failed" >&2
    exit 1
fi
echo "$(tail -n 1 "$tmp/pack.log") [$((SECONDS - started)) s]"
# The libraries parity opens at run time (not seen by ldd) are left to the host like the others.
if [ -f "$build/opened-libraries.txt" ]; then
    while IFS= read -r lib; do
        [ -n "$lib" ] || continue
        name=$(readelf -d "$lib" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
        grep -q "left to the host:.* ${name:-${lib##*/}}" "$tmp/pack.log" ||
            fail "the pack does not name ${name:-$lib}, which parity opens at run time, among the host's CUDA libraries"
    done <"$build/opened-libraries.txt"
fi
# Re-packing replaces the folder (and must not leave a staging folder behind).
bash "$HERE/pack.sh" --build "$build" --out "$tmp/made/pack" --no-cuda-libs >"$tmp/pack2.log" 2>&1 ||
    fail "packing again into the same folder failed: $(tail -n 3 "$tmp/pack2.log")"
leftovers=$(find "$tmp/made" -mindepth 1 -maxdepth 1 ! -name pack)
[ -z "$leftovers" ] || fail "packing twice left: $leftovers"
bash "$HERE/pack.sh" --build "$tmp/no-such-build" --out "$tmp/made/other" >"$tmp/pack3.log" 2>&1 &&
    fail "pack.sh accepted a build folder without bin/parity"
grep -q "bin/parity not found" "$tmp/pack3.log" || fail "pack.sh gave no clear message for a missing build: $(cat "$tmp/pack3.log")"

pack=$tmp/moved-to/x/parity
mv "$tmp/made/pack" "$pack"
for f in MANIFEST.txt README.txt env.sh bin/parity bin/mpirun bin/orted bin/ompi_info \
    share/parity/reports/parity_report.py share/parity/reports/parity_reports/tables/__init__.py; do
    [ -e "$pack/$f" ] || fail "the pack has no $f"
done

# The bare environment of a host that has nothing installed; the decoy mpirun comes first on
# PATH, so a wrapper that did not put the pack's bin/ in front would run it.
mkdir -p "$tmp/decoy"
# shellcheck disable=SC2016  # $0 and $* are the decoy's
printf '#!/bin/sh\necho "test-pack: the host mpirun was started: $0 $*" >&2\nexit 99\n' >"$tmp/decoy/mpirun"
chmod 755 "$tmp/decoy/mpirun"
bare=(env -i "PATH=$tmp/decoy:/usr/bin:/bin" "HOME=${HOME:-/root}" "TMPDIR=$tmp")

# --- 1. every library resolves inside the pack or to the host's allowed set ---------------
is_allowed_outside() { # SONAME
    case $1 in
        # glibc
        ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | libpthread.so.* | \
            librt.so.* | libutil.so.* | libresolv.so.* | libanl.so.* | libnss_*.so.* | \
            libthread_db.so.* | libBrokenLocale.so.* | libc_malloc_debug.so.*) return 0 ;;
        # the CUDA driver
        libcuda.so* | libcudadebugger.so* | libnvidia-*.so* | libnvcuvid.so* | libnvoptix.so*) return 0 ;;
        # the CUDA toolkit, left to the host by --no-cuda-libs
        libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libcufft.so* | libcufftw.so* | \
            libcurand.so* | libcusolver.so* | libcusolverMg.so* | libcusparse.so* | libcudnn*.so* | \
            libnvrtc.so* | libnvrtc-builtins.so* | libnvJitLink.so* | libnvToolsExt.so* | libcupti.so* | \
            libnvblas.so* | libnpp*.so* | libnvjpeg.so* | libcufile*.so* | libnvperf*.so*) return 0 ;;
    esac
    return 1
}
elves=()
while IFS= read -r -d '' f; do
    magic=
    IFS= read -r -n 4 magic <"$f" 2>/dev/null || true
    [ "$magic" = $'\x7fELF' ] && elves+=("$f")
done < <(find "$pack" -type f -print0)
((${#elves[@]} > 100)) || fail "only ${#elves[@]} ELF files in the pack"
# The loader's own list (ldd's, without ldd's script: several times faster), one batch per core,
# each with its own output so blocks stay whole.
jobs=$(nproc 2>/dev/null || echo 2)
for ((j = 0; j < jobs; j++)); do
    batch=()
    for ((i = j; i < ${#elves[@]}; i += jobs)); do batch+=("${elves[i]}"); done
    ((${#batch[@]})) || continue
    # shellcheck disable=SC2016
    "${bare[@]}" bash -c '. "$1/env.sh" && for f in "${@:2}"; do echo "$f:"; /lib64/ld-linux-x86-64.so.2 --list "$f"; done' \
        _ "$pack" "${batch[@]}" >"$tmp/ldd.$j.txt" 2>&1 &
done
wait
cat "$tmp"/ldd.*.txt >"$tmp/ldd.txt"
# Every file lists at least one library (libc at the least): a listing that failed is no pass.
listed=$(grep -c ' => ' "$tmp/ldd.txt" || true)
((listed >= ${#elves[@]})) || fail "the loader listed $listed libraries for ${#elves[@]} ELF files: $(head -n 3 "$tmp/ldd.txt")"
offenders=$(
    file=
    while IFS= read -r line; do
        if [[ $line != $'\t'* ]]; then file=${line%:}; continue; fi
        line=${line#$'\t'}
        [[ $line == *" => "* ]] || continue
        name=${line%% => *}
        path=${line#* => }
        path=${path% (0x*)}
        case $path in "$pack"/*) continue ;; esac
        is_allowed_outside "$name" && continue
        echo "  ${file#"$pack"/}: $name => $path"
    done <"$tmp/ldd.txt"
)
if [ -n "$offenders" ]; then
    fail "libraries resolved outside the pack:"
    echo "$offenders" | head -n 40 >&2
else
    pass "${#elves[@]} ELF files resolve every library inside the pack or to glibc/CUDA"
fi

# --- 2. parity runs from anywhere, with the pack's mpirun ------------------------------------
cd "$tmp/work"
if "${bare[@]}" "$pack/bin/parity" --help >"$tmp/help.txt" 2>&1 && grep -q Subcommands "$tmp/help.txt"; then
    pass "parity --help"
else
    fail "parity --help: $(head -n 5 "$tmp/help.txt")"
fi
check=(check --np 2 --no-large --filter 'all_reduce/ring/*' -q -T 60)
if timeout 60 "${bare[@]}" "$pack/bin/parity" "${check[@]}" --out "$tmp/work/check.h5" >"$tmp/check.txt" 2>&1 &&
    grep -q "at 2 ranks, .* 0 failed" "$tmp/check.txt" && [ -s "$tmp/work/check.h5" ]; then
    pass "$(grep 'at 2 ranks' "$tmp/check.txt")"
else
    fail "parity ${check[*]}: $(tail -n 5 "$tmp/check.txt")"
fi

# --- 3. Open MPI is relocated to the moved folder ------------------------------------------
prefix=$("${bare[@]}" "$pack/bin/ompi_info" --parsable --path prefix 2>&1 | sed -n 's/^path:prefix://p')
pkglib=$("${bare[@]}" "$pack/bin/ompi_info" --parsable --path pkglibdir 2>&1 | sed -n 's/^path:pkglibdir://p')
if [ "$prefix" = "$pack" ] && [[ $pkglib == "$pack"/* ]] && compgen -G "$pkglib/mca_btl_tcp.so" >/dev/null; then
    pass "ompi_info: prefix $prefix, plugins in ${pkglib#"$pack"/}"
else
    fail "ompi_info reports prefix '$prefix', plugins in '$pkglib' (want $pack)"
fi
if "${bare[@]}" "$pack/bin/ompi_info" --all 2>/dev/null | grep -q "mca_base_param_files.*$pack/etc/openmpi/openmpi-mca-params.conf"; then
    pass "ompi_info reads the pack's openmpi-mca-params.conf"
else
    fail "ompi_info does not read $pack/etc/openmpi/openmpi-mca-params.conf"
fi

# --- 4. what a running job has really loaded ------------------------------------------------
# One rank stalls before its first operation, so the job lives until parity's own -T 20
# would abort it: time enough to look at mpirun and the ranks in /proc.
"${bare[@]}" "$pack/bin/parity" check --np 2 --no-large --filter 'all_reduce/ring/*' -q \
    --inject-stall 1 -T 20 --out "$tmp/work/stall.h5" >"$tmp/stall.txt" 2>&1 &
bg_pid=$!
ranks=()
for _ in $(seq 150); do
    ranks=()
    for p in /proc/[0-9]*; do
        [ "$p/exe" -ef "$pack/libexec/parity" ] || continue
        tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=' && ranks+=("${p#/proc/}")
    done
    ((${#ranks[@]} >= 2)) && break
    sleep 0.1
done
sleep 1 # let the ranks finish loading before their maps are read
# parity stays the parent of mpirun (bench/cli/supervisor): the launcher is its child.
launcher_pid=$(pgrep -P "$bg_pid" | head -n 1)
launcher=$(readlink "/proc/${launcher_pid:-0}/exe" 2>/dev/null || echo "(gone)")
if ((${#ranks[@]} == 2)); then
    if [ "$launcher" = "$pack/libexec/openmpi/orterun" ]; then
        pass "mpirun is the pack's ($launcher)"
    else
        fail "mpirun is $launcher, not the pack's"
    fi
    foreign=$(for r in "${ranks[@]}" "$bg_pid" ${launcher_pid:+"$launcher_pid"}; do
        awk '$6 ~ /\.so/ {print $6}' "/proc/$r/maps" 2>/dev/null
    done | sort -u | while read -r so; do
        case $so in "$pack"/*) continue ;; esac
        is_allowed_outside "$(basename "$so")" || echo "  $so"
    done)
    if [ -n "$foreign" ]; then
        fail "mpirun or the ranks mapped libraries from outside the pack:"
        echo "$foreign" >&2
    else
        pass "mpirun and ranks ${ranks[*]} mapped only the pack's libraries and glibc's"
    fi
else
    fail "did not see 2 ranks of the pack's parity running (found ${#ranks[@]}): $(tail -n 3 "$tmp/stall.txt")"
fi
# Seen enough: end the job now rather than wait for -T (parity passes the signal to mpirun,
# which takes its ranks down with it).
kill "$bg_pid" 2>/dev/null || true
wait "$bg_pid" 2>/dev/null || true
bg_pid=

# --- 5. on a host with none of it installed ---------------------------------------------
# A private mount namespace in which /usr/lib/x86_64-linux-gnu holds only glibc (and the
# few libraries bash and coreutils need that the pack does not bundle), and Open MPI's
# configuration and help texts are gone. The system's ompi_info must then fail to start,
# proving the hiding worked, and the pack's parity must still run 2 ranks.
ns_note=
if [ "$(id -u)" -ne 0 ]; then
    ns_note="not root"
elif ! command -v unshare >/dev/null || ! unshare -m --propagation private true 2>/dev/null; then
    ns_note="mount namespaces unavailable here"
fi
if [ -z "$ns_note" ]; then
    libdir=/usr/lib/x86_64-linux-gnu
    keep=$tmp/glibc-only
    mkdir -p "$keep"
    declare -A bundled=()
    for f in "$pack"/lib/*; do bundled[$(basename "$f")]=1; done
    # glibc itself and the CUDA driver (the host's by definition), then what the shell tools
    # the wrappers use need, less anything the pack has.
    glibc_dir=$(dirname "$(readlink -f "$(ldd /bin/sh | awk '$1 == "libc.so.6" {print $3}')")")
    for f in "$glibc_dir"/{ld-linux-x86-64.so.2,libc.so.6,libm.so.6,libmvec.so.1,libdl.so.2,libpthread.so.0,librt.so.1,libutil.so.1,libresolv.so.2,libanl.so.1,libnss_*.so.2,libthread_db.so.1} \
        "$libdir"/libcuda.so* "$libdir"/libnvidia-*.so*; do
        if [ -e "$f" ]; then cp -L "$f" "$keep/"; fi
    done
    tools=(bash env readlink dirname getconf cut grep timeout cat)
    for t in "${tools[@]}"; do command -v "$t"; done | xargs ldd 2>/dev/null |
        awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
        [ -n "${bundled[$name]:-}" ] || [ -e "$keep/$name" ] || cp -L "$path" "$keep/$name"
    done
    # shellcheck disable=SC2016  # expanded by the shell in the namespace
    ns_script='
set -e
work=$1 keep=$2 libdir=$3; shift 3
for d in /etc/openmpi /usr/share/openmpi /usr/local/lib; do
    if [ -d "$d" ]; then mount -t tmpfs none "$d"; fi
done
# Without merged /usr, /lib/x86_64-linux-gnu is a second copy to hide.
if [ -d /lib/x86_64-linux-gnu ] && [ "$(readlink -f /lib/x86_64-linux-gnu)" != "$libdir" ]; then
    mount --bind "$keep" /lib/x86_64-linux-gnu
fi
mount --bind "$keep" "$libdir"   # last: mount itself needs the libraries it hides
if ompi_info --version >/dev/null 2>&1; then echo "the system Open MPI still runs: nothing was hidden" >&2; exit 90; fi
cd "$work"
exec "$@"'
    if timeout 60 unshare -m --propagation private bash -c "$ns_script" ns "$tmp/work" "$keep" "$libdir" \
        "${bare[@]}" "$pack/bin/parity" "${check[@]}" --out "$tmp/work/ns.h5" >"$tmp/ns.txt" 2>&1 &&
        grep -q "at 2 ranks, .* 0 failed" "$tmp/ns.txt"; then
        pass "with this machine's libraries hidden (only glibc left): $(grep 'at 2 ranks' "$tmp/ns.txt")"
    else
        fail "2 ranks with the system libraries hidden: $(tail -n 5 "$tmp/ns.txt")"
    fi
else
    echo "test-pack: note: the run with the system libraries hidden was not done ($ns_note)"
fi

echo "test-pack: pack $(du -sh "$pack" | cut -f1), $((SECONDS - started)) s"
if ((failures)); then
    echo "test-pack: $failures check(s) failed" >&2
    exit 1
fi
echo "test-pack: PASS"
