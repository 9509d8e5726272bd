# The install tests (tests/CMakeLists.txt: install_tree, install_consumer_cmake,
# install_consumer_pkgconfig), run by ctest as `cmake -DSTEP=... -P run_install_test.cmake`.
#
#   tree                cmake --install BUILD_DIR into WORK_DIR/prefix (emptied first), then check
#                       what is there: exactly include/pmhash/*.h of the source tree as headers,
#                       the library, the CMake package, pmhash.pc and (WITH_TOOL) a working
#                       bin/pmhash.
#   consumer_cmake      copy tests/install/{CMakeLists.txt,main.cc} out of the source tree,
#                       configure them with CMAKE_PREFIX_PATH=prefix (find_package(pmhash)), build,
#                       run, and check that no compile command names the source or build tree.
#   consumer_pkgconfig  compile main.cc with CXX -std=c++20 and `pkg-config --cflags --libs pmhash`
#                       (PKG_CONFIG_PATH=prefix/LIBDIR/pkgconfig), run it; the same path check.
#
# A consumer that compiles only because it sees pmhash's source tree would prove nothing: main.cc
# fails to compile if src/ or bench/ headers are reachable, and the path checks catch an include
# directory of the source tree.
cmake_minimum_required(VERSION 3.20)

foreach(v STEP SOURCE_DIR BUILD_DIR WORK_DIR LIBDIR INCLUDEDIR BINDIR CXX VERSION)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${v}=... is required")
  endif()
endforeach()
set(prefix ${WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

# Fails if `text` names the source or the build tree of pmhash (other than the test's own work
# directory, which lies inside the build tree).
function(check_no_tree_paths what text)
  string(REPLACE "${WORK_DIR}" "<work>" text "${text}")
  foreach(tree "${SOURCE_DIR}" "${BUILD_DIR}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${what} refers to pmhash's tree ${tree}:\n${text}")
    endif()
  endforeach()
endfunction()

if(STEP STREQUAL "tree")
  file(REMOVE_RECURSE ${WORK_DIR})
  set(config_args)
  if(CONFIG)
    set(config_args --config ${CONFIG})
  endif()
  run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} ${config_args})

  # Headers: exactly the public ones, nothing from src/ or bench/.
  file(GLOB expected RELATIVE ${SOURCE_DIR}/include ${SOURCE_DIR}/include/pmhash/*.h)
  file(GLOB_RECURSE installed RELATIVE ${prefix}/${INCLUDEDIR} ${prefix}/${INCLUDEDIR}/*)
  list(SORT expected)
  list(SORT installed)
  if(NOT installed STREQUAL expected)
    message(FATAL_ERROR "installed headers differ from include/pmhash/*.h:\n"
      "  installed: ${installed}\n  expected:  ${expected}")
  endif()

  foreach(f
      ${LIBDIR}/cmake/pmhash/pmhashConfig.cmake
      ${LIBDIR}/cmake/pmhash/pmhashConfigVersion.cmake
      ${LIBDIR}/cmake/pmhash/pmhashTargets.cmake
      ${LIBDIR}/pkgconfig/pmhash.pc)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()
  file(GLOB libs ${prefix}/${LIBDIR}/libpmhash.*)
  if(NOT libs)
    message(FATAL_ERROR "not installed: ${LIBDIR}/libpmhash.a (or .so)")
  endif()
  file(GLOB cmake_files ${prefix}/${LIBDIR}/cmake/pmhash/*.cmake)
  foreach(f ${cmake_files} ${prefix}/${LIBDIR}/pkgconfig/pmhash.pc)
    file(READ ${f} text)
    check_no_tree_paths("installed ${f}" "${text}")
  endforeach()

  if(WITH_TOOL)
    run("installed pmhash list" ${prefix}/${BINDIR}/pmhash list)
    if(NOT run_output MATCHES "(^|\n)reh\n")
      message(FATAL_ERROR "installed `pmhash list` does not list reh:\n${run_output}")
    endif()
  endif()
  message(STATUS "installed into ${prefix}: ${installed}; ${libs}")

elseif(STEP STREQUAL "consumer_cmake")
  set(dir ${WORK_DIR}/consumer_cmake)
  file(REMOVE_RECURSE ${dir})
  file(COPY ${SOURCE_DIR}/tests/install/CMakeLists.txt ${SOURCE_DIR}/tests/install/main.cc
    DESTINATION ${dir}/src)
  set(generator_args)
  if(GENERATOR)
    set(generator_args -G ${GENERATOR})
  endif()
  run("configuring the consumer (find_package)" ${CMAKE_COMMAND} -S ${dir}/src -B ${dir}/build
    ${generator_args}
    -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
  run("building the consumer (find_package)" ${CMAKE_COMMAND} --build ${dir}/build)
  file(READ ${dir}/build/compile_commands.json commands)
  check_no_tree_paths("the consumer's compile command" "${commands}")
  string(FIND "${commands}" "${prefix}/${INCLUDEDIR}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the consumer was not compiled against ${prefix}/${INCLUDEDIR}:\n"
      "${commands}")
  endif()
  run("running the consumer (find_package)" ${dir}/build/consumer)
  message(STATUS "${run_output}")

elseif(STEP STREQUAL "consumer_pkgconfig")
  find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  if(NOT PKG_CONFIG)
    message("SKIPPED: pkg-config not found (Debian: pkgconf; scripts/install-deps installs it)")
    return()
  endif()
  set(dir ${WORK_DIR}/consumer_pkgconfig)
  file(REMOVE_RECURSE ${dir})
  file(COPY ${SOURCE_DIR}/tests/install/main.cc DESTINATION ${dir})
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
  run("pkg-config --modversion pmhash" ${PKG_CONFIG} --modversion pmhash)
  string(STRIP "${run_output}" version)
  if(NOT version STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config reports pmhash ${version}, expected ${VERSION}")
  endif()
  run("pkg-config --cflags pmhash" ${PKG_CONFIG} --cflags pmhash)
  string(STRIP "${run_output}" cflags)
  run("pkg-config --libs pmhash" ${PKG_CONFIG} --libs pmhash)
  string(STRIP "${run_output}" libs)
  check_no_tree_paths("pkg-config's flags" "${cflags} ${libs}")
  string(FIND "${cflags}" "-I${prefix}/${INCLUDEDIR}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "pkg-config --cflags pmhash does not point into ${prefix}: ${cflags}")
  endif()
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  separate_arguments(libs UNIX_COMMAND "${libs}")
  run("compiling the consumer (pkg-config)"
    ${CXX} -std=c++20 -O1 ${cflags} ${dir}/main.cc -o ${dir}/consumer ${libs})
  set(ENV{LD_LIBRARY_PATH} "${prefix}/${LIBDIR}")  # in case the library is shared
  run("running the consumer (pkg-config)" ${dir}/consumer)
  message(STATUS "${run_output}")

else()
  message(FATAL_ERROR "run_install_test.cmake: unknown STEP '${STEP}'")
endif()
