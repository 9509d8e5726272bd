# ctest's pool_fuzz (tests/fuzz/CMakeLists.txt): cmake -DFUZZER= -DDIR= -DREGRESSIONS= -DSECONDS=
#   -P run_pool_fuzz.cmake
# Writes the seed corpus to DIR/seeds/<kind>, then fuzzes each index kind for SECONDS / kinds over
# its seeds and its regression inputs (REGRESSIONS/<kind>), new inputs going to a fresh
# DIR/work/<kind>; fails on the first crash, sanitizer report, leak or timeout (the input is left
# as DIR/<kind>-crash-*).
file(REMOVE_RECURSE ${DIR}/seeds ${DIR}/work)
file(MAKE_DIRECTORY ${DIR}/work)
execute_process(COMMAND ${FUZZER} --generate-corpus=${DIR}/seeds RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pool_fuzz: generating the seed corpus failed (${rc})")
endif()
execute_process(COMMAND ${FUZZER} --list-kinds OUTPUT_VARIABLE kinds RESULT_VARIABLE rc)
string(STRIP "${kinds}" kinds)
string(REPLACE "\n" ";" kinds "${kinds}")
list(LENGTH kinds n)
if(NOT rc EQUAL 0 OR n EQUAL 0)
  message(FATAL_ERROR "pool_fuzz: --list-kinds failed (${rc})")
endif()
math(EXPR each "${SECONDS} / ${n}")
if(each LESS 1)
  set(each 1)
endif()
foreach(kind IN LISTS kinds)
  message(STATUS "pool_fuzz: ${kind}, ${each} s")
  set(corpora ${DIR}/work/${kind} ${DIR}/seeds/${kind})
  file(MAKE_DIRECTORY ${DIR}/work/${kind})
  if(IS_DIRECTORY ${REGRESSIONS}/${kind})
    list(APPEND corpora ${REGRESSIONS}/${kind})
  endif()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env PMHASH_FUZZ_KIND=${kind}
      ${FUZZER} -max_total_time=${each} -max_len=200 -len_control=0 -timeout=20 -rss_limit_mb=2048
      -print_final_stats=1 -artifact_prefix=${DIR}/${kind}- ${corpora}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pool_fuzz: ${kind}: the fuzzer failed (${rc}); its input is in ${DIR}")
  endif()
endforeach()
