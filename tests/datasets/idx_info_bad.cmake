# idx_info_bad.cmake: ctest's check that examples/idx_info handles bad files: run it on a good
# IDX file and bad ones (not IDX, missing, a directory); it must exit with status 1 (not crash),
# describe the good file on stdout and print one "FILE: problem" line per bad file on stderr.
#     cmake -DEXE=path/to/idx_info -DSRC=source/root -P idx_info_bad.cmake
set(good ${SRC}/fuzz/corpus/u8_labels.gz)
set(not_idx ${SRC}/CMakeLists.txt)
set(missing ${SRC}/no-such-file.gz)
set(dir ${SRC}/fuzz)
execute_process(COMMAND ${EXE} ${good} ${not_idx} ${missing} ${dir}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("stdout:\n${out}stderr:\n${err}")
if(NOT rc STREQUAL "1")
    message(FATAL_ERROR "idx_info exited with '${rc}', want 1")
endif()
if(NOT out MATCHES "u8_labels.gz: u8, rank 1, dims \\(20\\)" OR NOT out MATCHES "10 classes: 0:2")
    message(FATAL_ERROR "idx_info did not describe the good file")
endif()
string(REGEX MATCHALL "[^\n]+\n" lines "${err}")
list(LENGTH lines n)
if(NOT n EQUAL 3)
    message(FATAL_ERROR "want 3 error lines, got ${n}")
endif()
foreach(f IN ITEMS "${not_idx}: bad magic" "${missing}: cannot open" "${dir}: is a directory")
    string(FIND "${err}" "${f}" at)
    if(at EQUAL -1)
        message(FATAL_ERROR "no line '${f}'")
    endif()
endforeach()
