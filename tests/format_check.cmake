# Every C source and header of strix follows .clang-format (run: clang-format -i FILE).
file(GLOB_RECURSE files ${SRC}/tensor/*.[ch] ${SRC}/engine/*.[ch] ${SRC}/cgraph/*.[ch] ${SRC}/autodiff/*.[ch]
     ${SRC}/optim/*.[ch] ${SRC}/nn/*.[ch] ${SRC}/datasets/*.[ch] ${SRC}/examples/*.[ch]
     ${SRC}/tests/*.[ch] ${SRC}/bench/*.[ch] ${SRC}/fuzz/*.[ch] ${SRC}/tools/*.[ch])
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
