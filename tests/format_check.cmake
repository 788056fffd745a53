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
set(bad "")
foreach(f IN LISTS files)
    execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${f}
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(NOT rc EQUAL 0)
        list(APPEND bad ${f})
    endif()
endforeach()
if(bad)
    list(JOIN bad "\n  " lines)
    message(FATAL_ERROR "not clang-formatted:\n  ${lines}")
endif()
list(LENGTH files n)
message(STATUS "${n} files follow .clang-format")
