# strix_module(NAME [RECURSE] HEADERS h... PUBLIC_DEPS t... PRIVATE_DEPS t... FRIENDS dir...):
# one layer of strix. Builds every .c of the folder (and of its subfolders with RECURSE, for a
# module kept in one folder per kernel family) into strix_NAME (alias strix::NAME) and records
# the module for the aggregate target, the install rules and strix.pc.
# Headers: the public ones (HEADERS, by name) live in the one public tree include/strix/, which
# is all a user of the module sees (installed as include/strix); the module's own folder holds
# its private headers and is on its own include path only. FRIENDS names other module folders
# whose private headers this module includes (a lower layer's internals it builds on, e.g.
# cgraph on tensor's kernel plumbing): visible in CMake, never in the installed tree. In-tree
# white-box code (tests, benchmarks, fuzzers) links strix_internal for every private folder.
function(strix_module name)
    cmake_parse_arguments(M "RECURSE" "" "HEADERS;PUBLIC_DEPS;PRIVATE_DEPS;FRIENDS" ${ARGN})
    if(M_RECURSE)
        file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.c)
    else()
        file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.c)
    endif()
    if(NOT srcs)
        message(STATUS "strix: module ${name} has no sources yet; skipped")
        return()
    endif()
    add_library(strix_${name} ${srcs})
    add_library(strix::${name} ALIAS strix_${name})
    target_include_directories(strix_${name}
        PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include/strix>
               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/strix>
        PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    foreach(f IN LISTS M_FRIENDS)
        get_property(fdirs GLOBAL PROPERTY STRIX_PRIVATE_DIRS_${f})
        target_include_directories(strix_${name} PRIVATE ${PROJECT_SOURCE_DIR}/${f} ${fdirs})
    endforeach()
    set_property(GLOBAL APPEND PROPERTY STRIX_PRIVATE_DIRS ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(strix_${name} PUBLIC ${M_PUBLIC_DEPS} PRIVATE strix_flags ${M_PRIVATE_DEPS})
    list(TRANSFORM M_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/include/strix/)
    set_target_properties(strix_${name} PROPERTIES PUBLIC_HEADER "${M_HEADERS}"
                          OUTPUT_NAME strix_${name})
    # Modules are listed top layer first, the order a static link needs.
    get_property(mods GLOBAL PROPERTY STRIX_MODULES)
    set_property(GLOBAL PROPERTY STRIX_MODULES strix_${name} ${mods})
endfunction()
