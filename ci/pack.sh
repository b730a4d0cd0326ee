#!/usr/bin/env bash
# Packs a parity build, Open MPI's launcher and every runtime library they need into one
# relocatable folder, for Linux x86_64 hosts (glibc, a CUDA driver) where none of Open MPI,
# HDF5, OpenBLAS etc. is installed or can be: users copy the folder anywhere and run
# OUT/bin/parity. Only glibc and the CUDA driver come from the host.
#
# Layout of OUT (Open MPI's own directories mirror its install prefix, so that OPAL_PREFIX=OUT
# finds its plugins, help texts and configuration):
#   bin/                  wrapper scripts: parity, parity_kernels, test_*, mpirun, mpiexec,
#                         orterun, orted, ompi_info (they source env.sh, then exec libexec/)
#   libexec/              the real parity executables (parity looks for its report scripts
#                         in <exe dir>/../share/parity/reports)
#   libexec/openmpi/      the real Open MPI executables
#   libexec/host/         shims that run host programs (python3, ssh) without the pack's
#                         libraries, which may be older than what those programs were built for
#   lib/                  every bundled shared library, flat, under the name the loader asks for
#   lib/<...>/openmpi3/   Open MPI's MCA plugins (path mirrors the build machine's prefix)
#   lib/<...>/pmix2/      PMIx's plugins and help texts
#   share/openmpi/        Open MPI's help texts;  etc/openmpi/  its configuration
#   share/parity/reports/ the report scripts
#   env.sh                sets everything up; source it from bash or zsh to use the pack by hand
#   MANIFEST.txt, README.txt
set -euo pipefail

usage() {
    cat <<'EOF'
usage: ci/pack.sh [--build DIR] [--out DIR] [--no-cuda-libs] [--help]

Packs DIR/bin/parity, parity_kernels and the test_* binaries, Open MPI's launcher and
plugins, the report scripts and every shared library they need (all but glibc and the
CUDA driver) into a relocatable folder; run OUT/bin/parity from anywhere.

  --build DIR      build directory holding bin/parity [default: build, in the source tree]
  --out DIR        folder to write; replaced if it already holds a pack
                   [default: dist/parity-<version>-<commit>-linux-x86_64, in the source tree]
  --no-cuda-libs   leave out the CUDA toolkit libraries (cuBLAS, NCCL, cudart, ...; cuBLASLt
                   alone is ~540 MB): the wrappers then look for them on the host at run time
  --help           this text
EOF
}

die() { echo "pack.sh: $*" >&2; exit 1; }
note() { echo "pack.sh: $*" >&2; }

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
build=$SRC/build
out=
cuda_libs=yes
while (($#)); do
    case $1 in
        --build) (($# >= 2)) || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --no-cuda-libs) cuda_libs=no; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "pack.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

[ -x "$build/bin/parity" ] || die "$build/bin/parity not found: build parity first (ci/build.sh) or pass --build DIR"
build=$(readlink -f -- "$build")
for tool in ldd readelf ompi_info; do
    command -v "$tool" >/dev/null || die "$tool not found (it comes with libc-bin, binutils, openmpi-bin)"
done
[ "$(uname -m)" = x86_64 ] || die "only x86_64 builds are packed (this is $(uname -m))"

# Name the pack after what the binary says it is, so two commits do not overwrite each other.
version=$("$build/bin/parity" --version 2>/dev/null) || die "$build/bin/parity --version failed"
commit=$(sed -n 's/.*(\([0-9a-f]\{7,\}\)[^)]*).*/\1/p' <<<"$version")
version=${version%% *}
if [ -z "$out" ]; then
    out=$SRC/dist/parity-$version${commit:+-${commit:0:12}}-linux-x86_64
fi
mkdir -p -- "$(dirname -- "$out")"
out=$(readlink -f -- "$out")
case $out in
    / | "$SRC" | "$build" | "$HOME") die "refusing to write the pack to $out" ;;
esac
# Re-running replaces the pack, but never a folder that is something else.
if [ -e "$out" ] && ! [ -f "$out/.parity-pack" ] && [ -n "$(ls -A -- "$out" 2>/dev/null)" ]; then
    die "$out exists and is not a parity pack; remove it or choose another --out"
fi

stage=$(dirname -- "$out")/.$(basename -- "$out").tmp.$$
cleanup() { rm -rf -- "$stage"; }
trap cleanup EXIT
trap "exit 1" INT TERM HUP PIPE
rm -rf -- "$stage"
mkdir -p "$stage"/{bin,libexec/openmpi,libexec/host,lib,share/parity/reports}
: >"$stage/.parity-pack"

# ---------------------------------------------------------------------------------------
# Which libraries come from the host.
# glibc must match the host's own loader, and the CUDA driver must match the host's kernel
# module; everything else, libstdc++ and libgcc_s included, travels with the pack.
is_glibc() {
    case $1 in
        ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | libpthread.so.* | \
            librt.so.* | libutil.so.* | libresolv.so.* | libanl.so.* | libnss_*.so.* | \
            libthread_db.so.* | libBrokenLocale.so.* | libc_malloc_debug.so.*) return 0 ;;
    esac
    return 1
}
is_cuda_driver() {
    case $1 in
        libcuda.so* | libcudadebugger.so* | libnvidia-*.so* | libnvcuvid.so* | libnvoptix.so*) return 0 ;;
    esac
    return 1
}
# The CUDA toolkit's redistributable libraries: bundled unless --no-cuda-libs.
is_cuda_toolkit() { # NAME [PATH]
    case $1 in
        libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libcufft.so* | libcufftw.so* | \
            libcurand.so* | libcusolver.so* | libcusolverMg.so* | libcusparse.so* | libcudnn*.so* | \
            libnvrtc.so* | libnvrtc-builtins.so* | libnvJitLink.so* | libnvToolsExt.so* | libcupti.so* | \
            libnvblas.so* | libnpp*.so* | libnvjpeg.so* | libcufile*.so* | libnvperf*.so*) return 0 ;;
    esac
    case ${2:-} in
        /usr/local/cuda*/* | */site-packages/nvidia/* | */dist-packages/nvidia/*) return 0 ;;
    esac
    return 1
}

# ---------------------------------------------------------------------------------------
# Dependency resolution. The loader's list already follows dependencies recursively, so one list
# per ELF file gives its whole closure; files that are only ever dlopen'ed (MCA plugins, PMIx, UCX,
# hwloc and ibverbs providers) are passed in explicitly.
declare -A lib_src=()        # soname -> path it resolved to on this machine
declare -A cuda_needed=()    # CUDA toolkit sonames left to the host (--no-cuda-libs)
declare -A missing=()        # ELF file -> sonames that do not resolve here

# Each file's libraries as ldd lists them ("FILE:", then a tab-indented line a library), asked of
# the dynamic loader itself: ldd is a script that starts the loader about three times a file,
# about seven times slower over a pack's two hundred files.
list_libraries() { # ELF...
    local rtld=/lib64/ld-linux-x86-64.so.2 f
    for f in "$@"; do
        echo "$f:"
        if [ -x "$rtld" ]; then "$rtld" --list "$f" 2>/dev/null || true; else ldd "$f" 2>/dev/null || true; fi
    done
}

resolve() { # ELF...: adds their libraries to lib_src
    local line file name path
    missing=()
    while IFS= read -r line; do
        if [[ $line != $'\t'* ]]; then
            file=${line%:}
            continue
        fi
        line=${line#$'\t'}
        [[ $line == *" => "* ]] || continue  # vdso, the loader itself
        name=${line%% => *}
        path=${line#* => }
        path=${path% (0x*)}
        is_glibc "$name" && continue
        is_cuda_driver "$name" && continue
        if [ "$path" = "not found" ]; then
            if is_cuda_toolkit "$name" && [ "$cuda_libs" = no ]; then
                cuda_needed[$name]=1
            else
                missing[$file]+=" $name"
            fi
            continue
        fi
        if is_cuda_toolkit "$name" "$path" && [ "$cuda_libs" = no ]; then
            cuda_needed[$name]=1
            continue
        fi
        [ -n "${lib_src[$name]:-}" ] || lib_src[$name]=$path
    done < <(list_libraries "$@")
}

# Whether a file starts with ELF's magic number (read by bash itself: the pack holds hundreds
# of files, and three processes a file cost seconds).
is_elf() { # FILE
    local magic=
    IFS= read -r -n 4 magic <"$1" 2>/dev/null
    [ "$magic" = $'\x7fELF' ]
}

# Files copied into the pack, for MANIFEST.txt: destination (relative) -> source.
declare -A copied=()
put() { # SRC DEST(relative to the pack) [MODE]
    install -D -m "${3:-644}" -- "$1" "$stage/$2"
    copied[$2]=$1
}

# Optional plugins whose libraries are missing on this machine could not load here either:
# they are left out rather than failing the pack.
put_plugins() { # DEST_DIR(relative) FILE...
    local dest=$1 f
    shift
    (($#)) || return 0
    resolve "$@"
    for f in "$@"; do
        if [ -n "${missing[$f]:-}" ]; then
            note "leaving out $f (needs${missing[$f]}, not found here)"
            continue
        fi
        put "$f" "$dest/${f##*/}"
    done
    # The left-out plugins' other libraries are harmless extras; bundling them keeps this simple.
}

# ---------------------------------------------------------------------------------------
# parity itself.
parity_bins=(parity)
[ -x "$build/bin/parity_kernels" ] && parity_bins+=(parity_kernels)
for f in "$build"/bin/test_*; do
    [ -f "$f" ] && [ -x "$f" ] && parity_bins+=("$(basename -- "$f")")
done
for b in "${parity_bins[@]}"; do
    put "$build/bin/$b" "libexec/$b" 755
done
resolve "${parity_bins[@]/#/$build/bin/}"
for f in "${!missing[@]}"; do
    die "$f needs${missing[$f]}, which cannot be found on this machine (set LD_LIBRARY_PATH?)"
done
# Libraries parity opens itself at first use (cuBLAS, cuBLASLt: reference/cuda/blas.cpp), which
# ldd does not list: the build names them in opened-libraries.txt; each goes in by its soname.
if [ -f "$build/opened-libraries.txt" ]; then
    while IFS= read -r lib; do
        [ -n "$lib" ] || continue
        [ -e "$lib" ] || die "parity opens $lib at run time (opened-libraries.txt), which is not on this machine"
        name=$(readelf -d "$lib" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
        [ -n "$name" ] || name=${lib##*/}
        if [ "$cuda_libs" = no ]; then
            cuda_needed[$name]=1
            continue
        fi
        path=$(dirname -- "$lib")/$name
        [ -e "$path" ] || path=$lib
        lib_src[$name]=$path
        resolve "$path"
    done <"$build/opened-libraries.txt"
fi

shopt -s nullglob
mapfile -t reports < <(cd "$SRC/reports" && find . -name '*.py' | sort)
((${#reports[@]})) || die "no report scripts in $SRC/reports"
for f in "${reports[@]}"; do
    put "$SRC/reports/${f#./}" "share/parity/reports/${f#./}" 644
done

# ---------------------------------------------------------------------------------------
# Open MPI: the launcher, its daemon and ompi_info, from the installation parity links
# against, with the directories it finds through its install prefix.
declare -A ompi=()
while IFS=: read -r _ key value; do
    [ -n "${ompi[$key]:-}" ] || ompi[$key]=$value
done < <(ompi_info --parsable --path all 2>/dev/null)
if [ -z "${ompi[prefix]:-}" ] || [ ! -d "${ompi[pkglibdir]:-}" ]; then
    die "ompi_info did not report Open MPI's directories"
fi
ompi_prefix=${ompi[prefix]}
# Where a directory under the prefix lands in the pack (the same relative path).
rel_to_prefix() { # DIR -> relative path, or nothing if DIR is outside the prefix
    case $1 in
        "$ompi_prefix"/*) echo "${1#"$ompi_prefix"/}" ;;
        *) ;;
    esac
}
ompi_pal=$(ldd "$(command -v ompi_info)" | awk '$1 ~ /^libopen-pal/ {print $3}')
if [ -n "${lib_src[libopen-pal.so.40]:-}" ] && [ -n "$ompi_pal" ] &&
    [ "$(readlink -f "$ompi_pal")" != "$(readlink -f "${lib_src[libopen-pal.so.40]}")" ]; then
    die "ompi_info on PATH ($(command -v ompi_info)) belongs to another Open MPI than the one parity links against"
fi

for b in orterun orted ompi_info; do
    [ -x "${ompi[bindir]}/$b" ] || die "${ompi[bindir]}/$b not found (apt-get install openmpi-bin)"
    put "${ompi[bindir]}/$b" "libexec/openmpi/$b" 755
done
resolve "$stage"/libexec/openmpi/*
for f in "${!missing[@]}"; do die "$f needs${missing[$f]}, not found here"; done

pkglib_rel=$(rel_to_prefix "${ompi[pkglibdir]}")
pkgdata_rel=$(rel_to_prefix "${ompi[pkgdatadir]}")
if [ -z "$pkglib_rel" ] || [ -z "$pkgdata_rel" ]; then
    die "Open MPI's plugins or help texts lie outside its prefix $ompi_prefix; cannot relocate them"
fi
put_plugins "$pkglib_rel" "${ompi[pkglibdir]}"/*.so
for f in $(cd "${ompi[pkgdatadir]}" && find . -type f); do
    put "${ompi[pkgdatadir]}/${f#./}" "$pkgdata_rel/${f#./}"
done
# Debian configures the sysconfdir as /etc/openmpi, outside the prefix; env.sh then points
# OPAL_SYSCONFDIR at the copy.
sysconf_rel=$(rel_to_prefix "${ompi[sysconfdir]}")
sysconf_env=
if [ -z "$sysconf_rel" ]; then
    sysconf_rel=etc/openmpi
    sysconf_env=yes
fi
for f in "${ompi[sysconfdir]}"/*; do
    [ -f "$f" ] && put "$f" "$sysconf_rel/$(basename -- "$f")"
done

# PMIx (an external library for Debian's Open MPI): its plugins, help texts and configuration
# sit under its own prefix. Debian configures its directories as absolute paths, not relative
# to the prefix, so env.sh sets each of them (PMIX_LIBDIR, PMIX_SYSCONFDIR, ...), not only
# PMIX_PREFIX.
pmix_rel=
if [ -n "${lib_src[libpmix.so.2]:-}" ]; then
    pmix_libdir=$(dirname -- "$(readlink -f -- "${lib_src[libpmix.so.2]}")")
    pmix_prefix=$(dirname -- "$pmix_libdir")
    pmix_rel=$(rel_to_prefix "$pmix_prefix")
    [ -n "$pmix_rel" ] || pmix_rel=pmix
    [ "$(basename -- "$pmix_libdir")" = lib ] || die "PMIx's library folder $pmix_libdir is not <prefix>/lib; teach ci/pack.sh about it"
    put_plugins "$pmix_rel/lib/pmix" "$pmix_libdir"/pmix/*.so
    if [ -d "$pmix_prefix/share/pmix" ]; then
        for f in "$pmix_prefix"/share/pmix/*; do
            [ -f "$f" ] && put "$f" "$pmix_rel/share/pmix/$(basename -- "$f")"
        done
    fi
    # Debian's sets mca_base_component_path to the absolute plugin folder; without it PMIx
    # looks in PMIX_PKGLIBDIR, which is the pack's.
    if [ -f "$pmix_prefix/share/pmix-mca-params.conf" ]; then
        put "$pmix_prefix/share/pmix-mca-params.conf" "$pmix_rel/share/pmix-mca-params.conf"
        sed -i 's|^\([[:space:]]*mca_base_component_path[[:space:]]*=.*\)|# \1   (ci/pack.sh: the pack sets PMIX_PKGLIBDIR instead)|' \
            "$stage/$pmix_rel/share/pmix-mca-params.conf"
    fi
fi

# Libraries that load modules of their own, found next to the library: UCX (for Open MPI's
# ucx plugins), rdma-core's verbs providers, hwloc's PCI discovery (the GL, OpenCL and
# libxml2 plugins would drag in X11, an OpenCL loader and ICU for nothing parity uses).
if [ -n "${lib_src[libucs.so.0]:-}" ]; then
    put_plugins lib/ucx "$(dirname -- "$(readlink -f -- "${lib_src[libucs.so.0]}")")"/ucx/lib*.so.0
fi
ibv_drivers=
if [ -n "${lib_src[libibverbs.so.1]:-}" ]; then
    ibv_dir=$(dirname -- "$(readlink -f -- "${lib_src[libibverbs.so.1]}")")/libibverbs
    put_plugins lib "$ibv_dir"/lib*-rdmav*.so
    for f in "$stage"/lib/lib*-rdmav*.so; do
        f=$(basename -- "$f")
        f=${f#lib}
        ibv_drivers+=${ibv_drivers:+,}${f%-rdmav*}
    done
fi
if [ -n "${lib_src[libhwloc.so.15]:-}" ]; then
    hwloc_dir=$(dirname -- "$(readlink -f -- "${lib_src[libhwloc.so.15]}")")/hwloc
    [ -f "$hwloc_dir/hwloc_pci.so" ] && put_plugins lib/hwloc "$hwloc_dir/hwloc_pci.so"
fi

# Every library found along the way.
for name in "${!lib_src[@]}"; do
    put "${lib_src[$name]}" "lib/$name" 755
done

# ---------------------------------------------------------------------------------------
# The oldest glibc the pack runs on: the newest GLIBC_x.y symbol version any file needs.
elf_files=()
while IFS= read -r -d '' f; do
    is_elf "$f" && elf_files+=("$f")
done < <(find "$stage" -type f -print0)
glibc_min=$(readelf -V -W "${elf_files[@]}" 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u | tail -n 1)
glibc_min=${glibc_min#GLIBC_}
[ -n "$glibc_min" ] || glibc_min=2.17

cuda_list=$(printf '%s\n' "${!cuda_needed[@]}" | sort | tr '\n' ' ')
cuda_list=${cuda_list% }

# ---------------------------------------------------------------------------------------
# env.sh: everything the pack's programs need, computed from where the pack is now.
{
    cat <<EOF
# Environment for this parity pack ($version${commit:+, commit $commit}). Source it from bash or
# zsh (. /path/to/pack/env.sh) to run the pack's programs by hand; the bin/ wrappers source it
# themselves. Written by ci/pack.sh.
_parity_glibc_min=$glibc_min
_parity_cuda_libs='$cuda_list'
_parity_pmix_rel='$pmix_rel'
_parity_sysconf_rel='${sysconf_env:+$sysconf_rel}'
_parity_ibv_drivers='$ibv_drivers'
EOF
    cat <<'EOF'

if [ -n "${BASH_VERSION:-}" ]; then
    _parity_self=${BASH_SOURCE[0]}
elif [ -n "${ZSH_VERSION:-}" ]; then
    eval '_parity_self=${(%):-%x}'
else
    # Other shells cannot tell a sourced file where it is.
    _parity_self=${PARITY_PACK_ROOT:-.}/env.sh
fi

_parity_env() {
    [ -n "${ZSH_VERSION:-}" ] && emulate -L sh
    local root glibc host_ldpath old_root path
    root=$(dirname -- "$(readlink -f -- "$_parity_self")")
    old_root=${PARITY_PACK_ROOT:-$root}

    # The pack brings everything but glibc, so the host's must be at least as new as the
    # build machine's symbols require.
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc 0.0')
    glibc=${glibc#glibc }
    if [ "${glibc%%.*}" -lt "${_parity_glibc_min%%.*}" ] ||
        { [ "${glibc%%.*}" -eq "${_parity_glibc_min%%.*}" ] &&
            [ "$(echo "$glibc" | cut -d. -f2)" -lt "${_parity_glibc_min#*.}" ]; }; then
        echo "parity pack: this host has glibc $glibc; the pack needs glibc $_parity_glibc_min or newer (make the pack on an older distribution)" >&2
        return 1
    fi

    # The host's own library path, without any pack's: for the host programs the pack starts
    # (libexec/host/), and searched for the CUDA libraries below.
    host_ldpath=$(_parity_without "${LD_LIBRARY_PATH:-}" "$root/lib" "$old_root/lib")
    export PARITY_HOST_LD_LIBRARY_PATH="$host_ldpath"
    export LD_LIBRARY_PATH="$root/lib${host_ldpath:+:$host_ldpath}"
    path=$(_parity_without "${PATH:-/usr/bin:/bin}" "$root/bin" "$old_root/bin")
    export PATH="$root/bin${path:+:$path}"
    export PARITY_PACK_ROOT="$root"

    if [ -n "$_parity_cuda_libs" ] && [ "${PARITY_PACK_CUDA_CHECKED:-}" != "$root" ]; then
        _parity_find_cuda "$root" "$host_ldpath"
        export PARITY_PACK_CUDA_CHECKED="$root"
    fi

    # Open MPI and PMIx find their plugins, help texts and configuration through these.
    export OPAL_PREFIX="$root"
    if [ -n "$_parity_sysconf_rel" ]; then export OPAL_SYSCONFDIR="$root/$_parity_sysconf_rel"; fi
    if [ -n "$_parity_pmix_rel" ]; then
        export PMIX_PREFIX="$root/$_parity_pmix_rel"
        export PMIX_EXEC_PREFIX="$PMIX_PREFIX" PMIX_LIBDIR="$PMIX_PREFIX/lib" PMIX_PKGLIBDIR="$PMIX_PREFIX/lib/pmix"
        export PMIX_DATAROOTDIR="$PMIX_PREFIX/share" PMIX_DATADIR="$PMIX_PREFIX/share"
        export PMIX_PKGDATADIR="$PMIX_PREFIX/share/pmix" PMIX_SYSCONFDIR="$PMIX_PREFIX/share"
    fi
    if [ -d "$root/lib/hwloc" ]; then export HWLOC_PLUGINS_PATH="$root/lib/hwloc"; fi
    # Hosts without rdma-core have no /etc/libibverbs.d to name the providers the pack brings.
    if [ -n "$_parity_ibv_drivers" ] && [ ! -d /etc/libibverbs.d ] && [ -z "${IBV_DRIVERS:-}${RDMAV_DRIVERS:-}" ]; then
        export IBV_DRIVERS="$_parity_ibv_drivers"
    fi
    # Host programs the pack's programs start: python3 for reports, ssh to reach other hosts.
    case ${PARITY_PYTHON:-} in
        */libexec/host/python3 | "") ;;
        *) export PARITY_HOST_PYTHON="$PARITY_PYTHON" ;;
    esac
    export PARITY_PYTHON="$root/libexec/host/python3"
    case ${OMPI_MCA_plm_rsh_agent:-} in
        */libexec/host/ssh) unset OMPI_MCA_plm_rsh_agent ;;
    esac
    case $root in
        *[[:space:]]*) ;; # Open MPI splits the agent at spaces
        *) if [ -z "${OMPI_MCA_plm_rsh_agent:-}" ] && command -v ssh >/dev/null 2>&1; then
               export OMPI_MCA_plm_rsh_agent="$root/libexec/host/ssh"
           fi ;;
    esac
    export PARITY_REPORTS_DIR="$root/share/parity/reports"
}

# LIST minus every entry equal to one of the other arguments.
_parity_without() {
    [ -n "${ZSH_VERSION:-}" ] && emulate -L sh
    local rest entry drop out=''
    rest=$1:
    shift
    while [ -n "$rest" ]; do
        entry=${rest%%:*}
        rest=${rest#*:}
        [ -n "$entry" ] || continue
        for drop in "$@"; do
            [ "$entry" = "$drop" ] && continue 2
        done
        out=${out:+$out:}$entry
    done
    printf '%s' "$out"
}

# The CUDA toolkit libraries a --no-cuda-libs pack leaves to the host: adds the folders that
# hold them to LD_LIBRARY_PATH, and says which are nowhere to be found.
_parity_find_cuda() { # ROOT HOST_LDPATH
    [ -n "${ZSH_VERSION:-}" ] && emulate -L sh
    local dirs lib dir found missing='' sites='' site cache cached
    dirs="$2:${CUDA_HOME:+$CUDA_HOME/lib64:$CUDA_HOME/lib:}${CUDA_PATH:+$CUDA_PATH/lib64:}/usr/local/cuda/lib64"
    cache=$( (/sbin/ldconfig -p || ldconfig -p) 2>/dev/null)
    for lib in $_parity_cuda_libs; do
        found=
        for dir in $(echo "$dirs" | tr ':' ' '); do
            if [ -e "$dir/$lib" ]; then found=$dir; break; fi
        done
        # A system-wide install in the loader's cache needs no path (if the file is still there).
        if [ -z "$found" ]; then
            cached=$(printf '%s\n' "$cache" | sed -n "s|^[[:space:]]*$lib (.*x86-64.*) => \(/.*\)|\1|p" | head -n 1)
            if [ -n "$cached" ] && [ -e "$cached" ]; then continue; fi
        fi
        # pip's nvidia-* wheels (as PyTorch installs them).
        if [ -z "$found" ]; then
            if [ -z "$sites" ]; then
                sites="$(LD_LIBRARY_PATH="$2" python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
$(ls -d "${VIRTUAL_ENV:-/nonexistent}"/lib/python3*/site-packages "${CONDA_PREFIX:-/nonexistent}"/lib/python3*/site-packages 2>/dev/null)"
            fi
            for site in $sites; do
                for dir in "$site"/nvidia/*/lib; do
                    if [ -e "$dir/$lib" ]; then found=$dir; break 2; fi
                done
            done
        fi
        if [ -n "$found" ]; then
            case ":$LD_LIBRARY_PATH:" in
                *":$found:"*) ;;
                *) export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$found" ;;
            esac
        else
            missing="$missing $lib"
        fi
    done
    if [ -n "$missing" ]; then
        echo "parity pack: CUDA libraries not found on this host:$missing" >&2
        echo "  (looked in LD_LIBRARY_PATH, \$CUDA_HOME/lib64, /usr/local/cuda/lib64, the ldconfig cache and python's site-packages/nvidia/*/lib)." >&2
        echo "  Install the CUDA toolkit or the nvidia-* pip wheels, set CUDA_HOME, or use a pack made without --no-cuda-libs." >&2
    fi
}

_parity_env
_parity_status=$?
unset -f _parity_env _parity_without _parity_find_cuda
unset _parity_self _parity_glibc_min _parity_cuda_libs _parity_pmix_rel _parity_sysconf_rel _parity_ibv_drivers
if [ "$_parity_status" -eq 0 ]; then
    unset _parity_status
else
    unset _parity_status
    false
fi
EOF
} >"$stage/env.sh"
copied[env.sh]="(written by ci/pack.sh)"

# ---------------------------------------------------------------------------------------
# Wrappers. exec -a gives Open MPI an absolute argv[0] under the pack: mpirun then behaves as
# if given --prefix OUT, so orted on other hosts is started as OUT/bin/orted (this wrapper).
wrapper() { # NAME REAL(relative to the pack)
    cat >"$stage/bin/$1" <<EOF
#!/bin/bash
# Runs the packed $1 with the pack's libraries (see ../README.txt).
# shellcheck source=/dev/null
. "\$(dirname -- "\$(readlink -f -- "\${BASH_SOURCE[0]}")")/../env.sh" || exit 127
exec -a "\$PARITY_PACK_ROOT/bin/$1" "\$PARITY_PACK_ROOT/$2" "\$@"
EOF
    chmod 755 "$stage/bin/$1"
    copied[bin/$1]="(wrapper for $2)"
}
for b in "${parity_bins[@]}"; do wrapper "$b" "libexec/$b"; done
for b in mpirun mpiexec orterun; do wrapper "$b" libexec/openmpi/orterun; done
wrapper orted libexec/openmpi/orted
wrapper ompi_info libexec/openmpi/ompi_info

# shellcheck disable=SC2016  # the shims' $ are for the shims
host_shim() { # NAME BODY
    {
        echo '#!/bin/bash'
        echo "# Runs the host's $1 with the host's own library path: the pack's libraries (older or"
        echo "# newer than what the host's $1 was built against) must not leak into it."
        echo 'if [ -n "${PARITY_HOST_LD_LIBRARY_PATH:-}" ]; then export LD_LIBRARY_PATH="$PARITY_HOST_LD_LIBRARY_PATH"; else unset LD_LIBRARY_PATH; fi'
        echo "$2"
    } >"$stage/libexec/host/$1"
    chmod 755 "$stage/libexec/host/$1"
    copied[libexec/host/$1]="(written by ci/pack.sh)"
}
# shellcheck disable=SC2016
# The reports need h5py, matplotlib and numpy: the first python3 that has them, Debian's
# /usr/bin/python3 before the one on PATH (a GPU machine's may be a framework's own), else
# python3 itself, which then names what is missing.
host_shim python3 'if [ -n "${PARITY_HOST_PYTHON:-}" ]; then exec "$PARITY_HOST_PYTHON" "$@"; fi
for candidate in /usr/bin/python3 "$(command -v python3)"; do
    if [ -x "$candidate" ] && "$candidate" -c "import h5py, matplotlib, numpy" 2>/dev/null; then exec "$candidate" "$@"; fi
done
exec python3 "$@"'
host_shim ssh 'exec ssh "$@"'

# ---------------------------------------------------------------------------------------
# MANIFEST.txt: each file, where it came from and the Debian package that owns it.
declare -A owner=()
# Where each copied file really is (symlinks followed), from one readlink for all of them.
declare -A real_of=()
sources=()
for dest in "${!copied[@]}"; do
    [[ ${copied[$dest]} == /* ]] && sources+=("${copied[$dest]}")
done
if ((${#sources[@]})); then
    mapfile -t reals < <(readlink -f -- "${sources[@]}")
    for i in "${!sources[@]}"; do real_of[${sources[i]}]=${reals[i]:-${sources[i]}}; done
fi

if command -v dpkg >/dev/null; then
    # dpkg knows a file under the path its package installed it at; under merged /usr that
    # may be /lib or /usr/lib, and the loader may have found it through a symlink.
    candidates=()
    for dest in "${!copied[@]}"; do
        src=${copied[$dest]}
        [[ $src == /* ]] || continue
        real=${real_of[$src]}
        for p in "$src" "$real"; do
            candidates+=("$p")
            case $p in
                /usr/lib/*) candidates+=("${p#/usr}") ;;
                /lib/*) candidates+=("/usr$p") ;;
            esac
        done
    done
    while IFS= read -r line; do
        case $line in
            diversion* | *", "* | "") continue ;;
            *": /"*) ;;
            *) continue ;;
        esac
        owner[${line#*: }]=${line%%: /*}
    done < <(dpkg -S "${candidates[@]}" 2>/dev/null || true)
fi
package_of() { # SRC: sets package (in this shell: one subshell a file would cost seconds)
    local real p
    package=-
    [[ $1 == /* ]] || return 0
    real=${real_of[$1]:-$1}
    for p in "$1" "$real" "${1#/usr}" "/usr$1" "${real#/usr}" "/usr$real"; do
        [ -n "$p" ] && [ -n "${owner[$p]:-}" ] && { package=${owner[$p]}; return 0; }
    done
    case $1 in
        "$build"/* | "$SRC"/*) package="(parity)" ;;
        *) package="(no package)" ;;
    esac
}
{
    echo "# parity pack $version${commit:+ ($commit)}, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null)"
    echo "# needs on the host: Linux x86_64, glibc >= $glibc_min, a CUDA driver for GPU runs${cuda_list:+, and the CUDA toolkit libraries $cuda_list}"
    echo "# file<TAB>source<TAB>package"
    for dest in $(printf '%s\n' "${!copied[@]}" | sort); do
        package_of "${copied[$dest]}"
        printf '%s\t%s\t%s\n' "$dest" "${copied[$dest]}" "$package"
    done
} >"$stage/MANIFEST.txt"

ompi_version=$(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p' | head -n 1)
cuda_note=
if [ -n "$cuda_list" ]; then
    cuda_note="
This pack was made with --no-cuda-libs: the CUDA toolkit libraries it needs ($cuda_list)
are looked for in LD_LIBRARY_PATH, \$CUDA_HOME/lib64, /usr/local/cuda/lib64, the ldconfig
cache and python's site-packages/nvidia/*/lib; the wrappers say which are missing."
fi
cat >"$stage/README.txt" <<EOF
parity $version${commit:+ ($commit)} for Linux x86_64: a self-contained folder; move or copy it anywhere.

  bin/parity run --np 4            the main job on 4 local ranks (see bin/parity --help)
  bin/parity run --np 8 --hostfile hosts.txt
                                   several hosts: the folder must be at the same path on each
                                   (a shared file system); mpirun starts bin/orted there
  . env.sh                         (bash/zsh) puts bin/ first on PATH and sets LD_LIBRARY_PATH,
                                   OPAL_PREFIX etc., to run bin/mpirun or the test_* by hand

Everything but glibc (>= $glibc_min needed) and the CUDA driver is inside: Open MPI $ompi_version,
PMIx, HDF5, OpenBLAS, libstdc++ and the rest.$cuda_note
Reports (parity report, and the end of parity run) use the host's python3 with matplotlib
and h5py; PARITY_HOST_PYTHON chooses another python. MANIFEST.txt lists every file, where it
came from and its Debian package.
EOF

rm -rf -- "$out"
mv -- "$stage" "$out"
trap - EXIT
size=$(du -sh -- "$out" | cut -f1)
echo "pack.sh: wrote $out ($size, ${#lib_src[@]} libraries${cuda_list:+; CUDA libraries left to the host: $cuda_list})"
