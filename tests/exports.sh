#!/bin/sh
# The dynamic symbols a built libhakmem.so defines must all be allowed:
# a malloc library that also stands in front of other calls (fork, ...)
# surprises its users and every other preloaded tool that wraps them.
#
#   exports.sh LIBHAKMEM malloc|hak
#
# malloc (builds that interpose, the default): the malloc API, its
# <malloc.h> extras, the C++ allocation operators (operator new, new[],
# delete, delete[] in every form: _Znwm, _Znam, _ZdlPv, _ZdaPv and their
# suffixed variants) and names starting with hak_. hak (-Dinterpose=false):
# names starting with hak_ only. Version definitions (nm's type A) are
# not symbols of code or data and are left out. Fails listing every
# other defined dynamic symbol, and when nm fails or the library lacks
# malloc (hak_malloc for hak).
set -u
lib=$1 mode=$2
syms=$(nm -D --defined-only "$lib") || { echo "FAIL: nm -D failed on $lib" >&2; exit 1; }
names=$(printf '%s\n' "$syms" | awk 'NF >= 3 && $2 != "A" { print $3 }' | sed 's/@.*//')
[ -n "$names" ] || { echo "FAIL: no defined dynamic symbol in $lib" >&2; exit 1; }
malloc_api='malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|free_sized|free_aligned_sized'
extras='malloc_trim|mallinfo|mallinfo2|malloc_stats|malloc_info'
cxx='_Zn[wa]m.*|_Zd[la]Pv.*'
case $mode in
malloc) allowed="^(hak_.*|$malloc_api|$extras|$cxx)\$" ;;
hak) allowed='^hak_.*$' ;;
*) echo "usage: exports.sh LIBHAKMEM malloc|hak" >&2; exit 2 ;;
esac
# the check below must have the library's own names to pass
need=malloc
[ "$mode" = hak ] && need=hak_malloc
printf '%s\n' "$names" | grep -qx "$need" || { echo "FAIL: $lib does not export $need" >&2; exit 1; }
extra=$(printf '%s\n' "$names" | grep -Ev "$allowed")
if [ -n "$extra" ]; then
    echo "FAIL: $lib exports symbols outside the allowed set ($mode):" >&2
    printf '  %s\n' $extra >&2
    exit 1
fi
echo "$(printf '%s\n' "$names" | wc -l) exported symbols, all allowed ($mode)"
