#!/usr/bin/env bash
# Checks the per-ISA linkage rule (docs/kernels.md, STYLE.md 3.2): each per-ISA
# object defines exactly one external symbol, its Fill<Isa>Kernels. Weak symbols
# (W/V, inline functions and template instances) count as external: the linker
# keeps one copy of a weak symbol for the whole program, so a copy compiled with
# -mavx512* flags could be the one baseline callers run.
#   tools/check_isa_linkage.sh <isa_sse42.cc.o | isa_avx2.cc.o | isa_avx512.cc.o |
#                               isa_avx512_vnni.cc.o |
#                               isa_avx512_bf16.cc.o | isa_neon.cc.o>...
# NM may name the nm to use (CMake passes CMAKE_NM).
#
# One exception: a weak instance of a template whose arguments name this unit's
# own xsimd arch (e.g. xsimd::exp<..., xsimd::fma3<xsimd::avx2>>) cannot be
# shared with another unit, because no other unit instantiates that arch and the
# arch is part of the symbol's name. Unoptimised and sanitizer builds emit such
# instances out of line. A weak xsimd::kernel::add<xsimd::sse4_2> in the AVX2
# unit, by contrast, would collide with the SSE4.2 unit's copy, and still fails.
#
# The NEON unit has a second exception: xsimd 8.1's neon back end takes the
# address of its plain inline wrappers (xsimd::kernel::wrap::vreinterpretq_*,
# vaddq_*, ...), so they are emitted as weak symbols. They are harmless there:
# the NEON unit is compiled without any -m flag (Advanced SIMD is baseline on
# AArch64) and is the only unit of an AArch64 build that includes xsimd, so
# every copy the linker could pick is the same baseline code.
set -euo pipefail

nm_tool="${NM:-nm}"
if [ "$#" -eq 0 ]; then
  echo "usage: $0 <per-ISA object files...>" >&2
  exit 2
fi

# Compiler-generated, not code: the exception personality's DWARF reference is
# an identical data word in every object, whatever the flags.
allowed='^DW\.ref\.__gxx_personality_v0$'

failed=0
for obj in "$@"; do
  baseline_weak='^$'
  case "$(basename "$obj")" in
    isa_sse42.cc.o)
      want='ringkv::kernels::FillSse42Kernels(ringkv::kernels::KernelTable&)'
      own_arch='xsimd::sse4_2'
      ;;
    isa_avx2.cc.o)
      want='ringkv::kernels::FillAvx2Kernels(ringkv::kernels::KernelTable&)'
      own_arch='xsimd::fma3<xsimd::avx2>'
      ;;
    isa_avx512.cc.o)
      want='ringkv::kernels::FillAvx512Kernels(ringkv::kernels::KernelTable&)'
      own_arch='xsimd::avx512bw'
      ;;
    isa_avx512_vnni.cc.o)
      # Its arch has internal linkage (avx512_extension_arch.h), so no weak
      # instance of it is allowed: one on xsimd::avx512bw would collide with the
      # AVX-512 unit's.
      want='ringkv::kernels::FillAvx512VnniAttend(ringkv::kernels::KernelTable&)'
      own_arch=''
      ;;
    isa_avx512_bf16.cc.o)
      # Internal linkage too, for the same reason.
      want='ringkv::kernels::FillAvx512Bf16Attend(ringkv::kernels::KernelTable&)'
      own_arch=''
      ;;
    isa_neon.cc.o)
      want='ringkv::kernels::FillNeonKernels(ringkv::kernels::KernelTable&)'
      own_arch='xsimd::neon64'
      baseline_weak='^xsimd::kernel::wrap::'
      ;;
    *)
      echo "FAIL $obj: not a per-ISA object (isa_sse42/avx2/avx512/avx512_vnni/avx512_bf16/neon.cc.o)" >&2
      failed=1
      continue
      ;;
  esac
  if [ ! -f "$obj" ]; then
    echo "FAIL $obj: no such file" >&2
    failed=1
    continue
  fi
  # "<address> <type> <demangled name with spaces>": keep type and name.
  symbols=$("$nm_tool" --defined-only --extern-only --demangle "$obj" |
    awk '{ type = $2; $1 = ""; $2 = ""; sub(/^  /, ""); print type "\t" $0 }')
  found=0
  own_weak=0
  extra=""
  while IFS=$'\t' read -r type name; do
    [ -z "$name" ] && continue
    if [ "$name" = "$want" ] && [ "$type" = "T" ]; then
      found=1
    elif [[ "$name" =~ $allowed ]]; then
      :
    elif [[ "$type" =~ ^[WV]$ && "$name" =~ $baseline_weak ]]; then
      own_weak=$((own_weak + 1))
    elif [[ -n "$own_arch" && "$type" =~ ^[WV]$ && "$name" == *"$own_arch"* &&
            "$name" != *"fma3<$own_arch>"* ]]; then
      own_weak=$((own_weak + 1))
    else
      extra+="    $type $name"$'\n'
    fi
  done <<<"$symbols"
  if [ "$found" -ne 1 ]; then
    echo "FAIL $obj: does not define $want" >&2
    failed=1
  fi
  if [ -n "$extra" ]; then
    echo "FAIL $obj: external symbols besides $want:" >&2
    printf '%s' "$extra" >&2
    failed=1
  fi
  if [ "$found" -eq 1 ] && [ -z "$extra" ]; then
    echo "ok   $obj: only $want (+ $own_weak weak instances named for its own arch)"
  fi
done
exit "$failed"
