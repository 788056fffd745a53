# strix_module(NAME [RECURSE] HEADERS h... DEPS target...): one layer of strix. Builds every .c
# of the folder (and of its subfolders with RECURSE, for a module kept in one folder per kernel
# family) into strix_NAME (alias strix::NAME), publishes its headers under include/strix, and
# records the module for the aggregate target, the install rules and strix.pc.
function(strix_module name)
    cmake_parse_arguments(M "RECURSE" "" "HEADERS;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
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
    target_include_directories(strix_${name} PUBLIC
        $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>
        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/strix>)
    target_link_libraries(strix_${name} PUBLIC ${M_PUBLIC_DEPS} PRIVATE strix_flags ${M_PRIVATE_DEPS})
    list(TRANSFORM M_HEADERS PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
    set_target_properties(strix_${name} PROPERTIES PUBLIC_HEADER "${M_HEADERS}"
                          OUTPUT_NAME strix_${name})
    # Modules are listed top layer first, the order a static link needs.
    get_property(mods GLOBAL PROPERTY STRIX_MODULES)
    set_property(GLOBAL PROPERTY STRIX_MODULES strix_${name} ${mods})
endfunction()
