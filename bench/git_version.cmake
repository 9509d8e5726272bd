# Writes OUTPUT from INPUT with the current git commit of SOURCE_DIR (cmake -P script).
# Without git or outside a work tree, the commit is "unknown".
set(PMHASH_GIT_COMMIT "unknown")
set(PMHASH_GIT_DIRTY "false")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD
    WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE commit RESULT_VARIABLE rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND commit)
    set(PMHASH_GIT_COMMIT "${commit}")
    # Tracked files that differ from HEAD (untracked files do not count).
    execute_process(COMMAND ${GIT_EXECUTABLE} diff-index --quiet HEAD --
      WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      set(PMHASH_GIT_DIRTY "true")
    endif()
  endif()
endif()
configure_file(${INPUT} ${OUTPUT} @ONLY)
