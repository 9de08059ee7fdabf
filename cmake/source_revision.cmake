# aotinfer_source_revision(<out>): the git commit of the source tree, or AOTINFER_SOURCE_REVISION
# from the environment (for builds from an sdist or a tarball), or "unknown".
function(aotinfer_source_revision out)
  set(rev "unknown")
  if(DEFINED ENV{AOTINFER_SOURCE_REVISION})
    set(rev "$ENV{AOTINFER_SOURCE_REVISION}")
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
