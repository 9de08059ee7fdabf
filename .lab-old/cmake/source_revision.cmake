# aotinfer_source_revision(<out>): AOTINFER_SOURCE_REVISION from the environment, or the
# revision a provider sdist was stamped with (cmake/source_revision.txt, written only into
# the sdist's tree by ci/build_sdists.py: an unpacked sdist may sit inside a packager's own
# git checkout, whose commit is not ours), or the git commit of the source tree, or "unknown".
function(aotinfer_source_revision out)
  set(rev "unknown")
  set(stamp "${PROJECT_SOURCE_DIR}/cmake/source_revision.txt")
  if(DEFINED ENV{AOTINFER_SOURCE_REVISION})
    set(rev "$ENV{AOTINFER_SOURCE_REVISION}")
  elseif(EXISTS "${stamp}")
    file(STRINGS "${stamp}" rev LIMIT_COUNT 1)
    if(NOT rev)
      set(rev "unknown")
    endif()
  else()
    find_package(Git QUIET)
    if(GIT_FOUND)
      execute_process(
        COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD
        WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
        OUTPUT_VARIABLE git_rev
        OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE git_rc
        ERROR_QUIET)
      if(git_rc EQUAL 0 AND git_rev)
        set(rev "${git_rev}")
      endif()
    endif()
  endif()
  set(${out} "${rev}" PARENT_SCOPE)
endfunction()
