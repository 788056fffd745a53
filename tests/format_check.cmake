# Every C source and header of strix follows .clang-format (run: clang-format -i FILE): the
# module folders that cmake/modules.txt lists, the public headers (include/), and the tool,
# examples, tests, benchmarks and fuzz targets.
file(STRINGS ${SRC}/cmake/modules.txt dirs REGEX "^[a-z]")
list(APPEND dirs include tools examples tests bench fuzz)
set(globs "")
foreach(d IN LISTS dirs)
    list(APPEND globs ${SRC}/${d}/*.[ch])
endforeach()
file(GLOB_RECURSE files ${globs})
# One clang-format process for all of them (one per file costs more than the checking): it
# names each file it would change in a warning on stderr.
execute_process(COMMAND ${CLANG_FORMAT} --dry-run ${files}
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "clang-format failed (${rc}):\n${err}")
endif()
string(REGEX MATCHALL "[^\n]*\\.[ch]:[0-9]+:[0-9]+: (warning|error):" hits "${err}")
set(bad "")
foreach(h IN LISTS hits)
    string(REGEX REPLACE ":[0-9]+:[0-9]+: (warning|error):$" "" f "${h}")
    list(APPEND bad ${f})
endforeach()
list(REMOVE_DUPLICATES bad)
if(bad)
    list(JOIN bad "\n  " lines)
    message(FATAL_ERROR "not clang-formatted:\n  ${lines}")
endif()
list(LENGTH files n)
message(STATUS "${n} files follow .clang-format")
