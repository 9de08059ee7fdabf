# cmake -P script: writes generated/build_config.h and generated/manifest.json from the
# -D variables CMakeLists.txt passes, plus the source revision read now (see
# source_revision.cmake), so that every build -- not only the first configure -- records
# the commit it was built from.
include(${AOTINFER_SOURCE_DIR}/cmake/source_revision.cmake)
set(PROJECT_SOURCE_DIR ${AOTINFER_SOURCE_DIR})
aotinfer_source_revision(AOTINFER_SOURCE_REVISION)
configure_file(${AOTINFER_SOURCE_DIR}/cmake/build_config.h.in ${AOTINFER_OUT_DIR}/build_config.h @ONLY)
configure_file(${AOTINFER_SOURCE_DIR}/cmake/manifest.json.in ${AOTINFER_OUT_DIR}/manifest.json @ONLY)
