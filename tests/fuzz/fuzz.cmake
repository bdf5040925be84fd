# The libFuzzer target (docs/fuzzing.md), built only with -DEPIFUSE_FUZZ=ON and
# clang: tools/fuzz.sh configures build-fuzz/ so. The library sources it needs
# are compiled again here, instrumented for coverage and sanitized, so that the
# default `epifuse` library and everything linking it stay as they are.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "EPIFUSE_FUZZ needs clang (libFuzzer): configure with CXX=clang++")
endif()

# UB aborts instead of printing and going on; libstdc++'s checked operator[]
# and friends (no ABI change, unlike _GLIBCXX_DEBUG) make bad indices crashes.
set(EPIFUSE_FUZZ_FLAGS -fno-sanitize-recover=all -fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS)

# Only what a chain goes through on its way to source text (its file read with
# a cap included): no backend, runtime, reference evaluator or .npy I/O.
file(GLOB_RECURSE EPIFUSE_FUZZ_LIB_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/json/*.cpp
     ${PROJECT_SOURCE_DIR}/src/ir/*.cpp ${PROJECT_SOURCE_DIR}/src/codegen/*.cpp
     ${PROJECT_SOURCE_DIR}/src/io/text_file.cpp)
add_library(epifuse_fuzz_lib STATIC ${EPIFUSE_FUZZ_LIB_SOURCES} ${EPIFUSE_EMBEDDED_CPP})
target_include_directories(epifuse_fuzz_lib
  PUBLIC ${PROJECT_SOURCE_DIR}/include
  PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/templates ${XXHASH_INCLUDE_DIR})
target_link_libraries(epifuse_fuzz_lib PUBLIC fmt::fmt-header-only nlohmann_json::nlohmann_json
                      Threads::Threads ${CMAKE_DL_LIBS})
target_compile_definitions(epifuse_fuzz_lib PUBLIC EPIFUSE_VERSION="${PROJECT_VERSION}")
target_compile_options(epifuse_fuzz_lib PRIVATE -fsanitize=fuzzer-no-link,address,undefined ${EPIFUSE_FUZZ_FLAGS})

add_executable(epifuse_fuzz_chain ${CMAKE_CURRENT_LIST_DIR}/fuzz_chain.cpp ${CMAKE_CURRENT_LIST_DIR}/json_mutator.cpp)
target_include_directories(epifuse_fuzz_chain PRIVATE ${PROJECT_SOURCE_DIR}/src ${XXHASH_INCLUDE_DIR})
target_compile_options(epifuse_fuzz_chain PRIVATE -fsanitize=fuzzer,address,undefined ${EPIFUSE_FUZZ_FLAGS})
target_link_options(epifuse_fuzz_chain PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(epifuse_fuzz_chain PRIVATE epifuse_fuzz_lib)

# The C ABI target (tests/fuzz/fuzz_c_api.cpp): the entry points the Python
# module calls, evaluation on the CPU reference included, so it needs the rest
# of the library too (reference evaluator, runtime and backend for the link;
# it never opens a GPU toolkit). Instrumented the same way.
file(GLOB_RECURSE EPIFUSE_FUZZ_REST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.cpp)
list(FILTER EPIFUSE_FUZZ_REST_SOURCES EXCLUDE REGEX "/src/(capi|bench|json|ir|codegen)/|/src/io/text_file.cpp$")
add_library(epifuse_fuzz_rest_lib STATIC ${EPIFUSE_FUZZ_REST_SOURCES})
target_include_directories(epifuse_fuzz_rest_lib
  PUBLIC ${PROJECT_SOURCE_DIR}/include
  PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/templates ${XXHASH_INCLUDE_DIR})
target_link_libraries(epifuse_fuzz_rest_lib PUBLIC epifuse_fuzz_lib)
target_compile_options(epifuse_fuzz_rest_lib PRIVATE -fsanitize=fuzzer-no-link,address,undefined ${EPIFUSE_FUZZ_FLAGS})
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/backend/hiprtc_worker.cpp TARGET_DIRECTORY epifuse_fuzz_rest_lib
  PROPERTIES COMPILE_DEFINITIONS EPIFUSE_INSTALL_BINDIR="${CMAKE_INSTALL_FULL_BINDIR}")

add_executable(epifuse_fuzz_c_api ${CMAKE_CURRENT_LIST_DIR}/fuzz_c_api.cpp ${PROJECT_SOURCE_DIR}/src/capi/c_api.cpp
  ${PROJECT_SOURCE_DIR}/src/capi/c_api_jit.cpp)
target_include_directories(epifuse_fuzz_c_api PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(epifuse_fuzz_c_api PRIVATE -fsanitize=fuzzer,address,undefined ${EPIFUSE_FUZZ_FLAGS})
target_link_options(epifuse_fuzz_c_api PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(epifuse_fuzz_c_api PRIVATE epifuse_fuzz_rest_lib epifuse_fuzz_lib)
