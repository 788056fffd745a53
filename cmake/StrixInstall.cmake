# Install rules: libraries, public headers under include/strix, an exported CMake package
# (find_package(strix) -> strix::strix and strix::<module>) and a pkg-config file strix.pc.
include(CMakePackageConfigHelpers)

install(TARGETS ${STRIX_MODULES} strix strix_flags
    EXPORT strixTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strix)
install(EXPORT strixTargets NAMESPACE strix:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strix)

configure_package_config_file(cmake/strixConfig.cmake.in
    ${CMAKE_CURRENT_BINARY_DIR}/strixConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strix)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/strixConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/strixConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/strixConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strix)

set(STRIX_PC_LIBS "")
foreach(m IN LISTS STRIX_MODULES)
    string(APPEND STRIX_PC_LIBS " -l${m}")
endforeach()
# The prefix relative to the .pc file, so the installed tree can be moved.
file(RELATIVE_PATH STRIX_PC_UP /x/${CMAKE_INSTALL_LIBDIR}/pkgconfig /x)
configure_file(cmake/strix.pc.in ${CMAKE_CURRENT_BINARY_DIR}/strix.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/strix.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
