# The provider table: which SASS targets each provider wheel holds.
# core/aotinfer/_arches.py holds the same table for the Python side (tests check they agree).
#
#   provider  SASS targets        serves compute capability
#   sm75      sm_75               7.5
#   sm80      sm_80 sm_89         8.0 8.6 8.7 8.9 (sm_89 SASS for 8.9's fp8 instructions)
#   sm90a     sm_90a              9.0
#   sm100a    sm_100a             10.0
#   sm110a    sm_110a             11.0
#   sm120f    sm_120f             12.0 12.1 (family target)
set(AOTINFER_PROVIDERS sm75 sm80 sm90a sm100a sm110a sm120f)
set(AOTINFER_TARGETS_sm75 75)
set(AOTINFER_TARGETS_sm80 80 89)
set(AOTINFER_TARGETS_sm90a 90a)
set(AOTINFER_TARGETS_sm100a 100a)
set(AOTINFER_TARGETS_sm110a 110a)
set(AOTINFER_TARGETS_sm120f 120f)

# aotinfer_provider_targets(<provider> <out_gencode_flags> <out_sass_list>)
# SASS only (code=sm_XX, never compute_XX): no PTX in the fatbin, so no driver JIT ever.
function(aotinfer_provider_targets provider out_flags out_sass)
  if(NOT provider IN_LIST AOTINFER_PROVIDERS)
    string(REPLACE ";" ", " valid "${AOTINFER_PROVIDERS}")
    message(FATAL_ERROR "AOTINFER_PROVIDER='${provider}' is not a provider; valid: ${valid}")
  endif()
  set(flags "")
  set(sass "")
  foreach(t IN LISTS AOTINFER_TARGETS_${provider})
    list(APPEND flags "-gencode=arch=compute_${t},code=sm_${t}")
    list(APPEND sass "sm_${t}")
  endforeach()
  set(${out_flags} "${flags}" PARENT_SCOPE)
  set(${out_sass} "${sass}" PARENT_SCOPE)
endfunction()
