# What `cmake --install` adds beyond the library and the tools (the systemd
# unit, chimed's default config, the Python package) and the Debian packages
# CPack makes from the install components (`cpack -G DEB` in the build dir;
# scripts/package.sh):
#
#   component  package       contents
#   runtime    libchime1     libchime.so.1*
#   dev        libchime-dev  headers, libchime.so, libchime.a, chime.pc,
#                            chime-static.pc, lib/cmake/chime/
#   daemon     chimed        chimed, chimectl, chime-actor, chime-learner,
#                            chimed.service, /etc/chime/chimed.json (conffile)
#   python     python3-chime the chime module, for Debian's python3
#
# The packages install under /usr whatever CMAKE_INSTALL_PREFIX says.

# The unit names the installed chimed and the config lives in /etc (as
# GNUInstallDirs has it: /etc for the prefix /usr, PREFIX/etc otherwise):
# both are known only at install time, when the prefix is final (as for the
# .pc files in src/lib, and as they are, written into a directory of this
# install's own).
if(TARGET chimed)
  install(CODE "
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(chime_etc /etc/chime)
    else()
      set(chime_etc \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}/chime\")
    endif()
    set(CHIME_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    ${chime_install_dir_code}
    configure_file(${PROJECT_SOURCE_DIR}/deploy/systemd/chimed.service.in
                   \${chime__install_dir}/chimed.service @ONLY)
    file(INSTALL \${chime__install_dir}/chimed.service
         DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
    file(REMOVE_RECURSE \${chime__install_dir})
    file(INSTALL ${PROJECT_SOURCE_DIR}/deploy/systemd/chimed.json
         DESTINATION \"\${chime_etc}\" FILE_PERMISSIONS OWNER_READ
         OWNER_WRITE GROUP_READ WORLD_READ)" COMPONENT daemon)
  # The Grafana dashboard over chimed's metrics, for an operator to import.
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/grafana/chime.json
          DESTINATION ${CMAKE_INSTALL_DATADIR}/chime/grafana COMPONENT daemon)
endif()

# The Python package as Debian lays it out: /usr/lib/python3/dist-packages
# (the CMake-built module is for Debian's python3; pip installs elsewhere,
# python/setup.py). The source's .py files, not the build tree's: the
# installed package has no _build.py, so ensure_server looks on PATH.
set(CHIME_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
    "Where cmake --install puts the chime Python package (under the prefix)")
if(TARGET chime_python)
  install(TARGETS chime_python
          LIBRARY DESTINATION ${CHIME_PYTHON_INSTALL_DIR}/chime
          COMPONENT python)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/chime/
          DESTINATION ${CHIME_PYTHON_INSTALL_DIR}/chime COMPONENT python
          FILES_MATCHING PATTERN "*.py" PATTERN "_build.py" EXCLUDE
          PATTERN "__pycache__" EXCLUDE)
endif()

set(chime_abi ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
if(PROJECT_VERSION_MAJOR GREATER 0)
  set(chime_abi ${PROJECT_VERSION_MAJOR})
endif()
set(CPACK_PACKAGE_NAME chime)
set(CPACK_PACKAGE_VENDOR chime)
set(CPACK_PACKAGE_CONTACT "chime maintainers <chime@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Replay batches for RL learners over shared-memory rings and gRPC")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
# DESTDIR staging with the real prefix: the .pc files and the unit written
# at install time must name /usr, not CPack's staging directory.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev daemon)
if(TARGET chime_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# Depends from the ELF files (dpkg-shlibdeps): gRPC, protobuf-c, libuv, ...
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(chime_this "(= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libchime${chime_abi})
# With this CPack writes the postinst/postrm that run ldconfig, as a shared
# library package does (CMake 3.25 writes no shlibs file for it, though).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "chime replay client and embedded server (shared library)")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libchime-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# libchime.a's users link what it needs: the -dev packages chime-static.pc
# and chimeConfig.cmake name.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libchime${chime_abi} ${chime_this}, libgrpc-dev, libprotobuf-c-dev, libuv1-dev, libjansson-dev, libmicrohttpd-dev, libzstd-dev, pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "chime headers, static library, pkg-config and CMake files")

set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME chimed)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION net)
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
    "chime replay server (chimed), chimectl, chime-actor, chime-learner")
# Maintainer scripts: systemd learns of the unit; purge removes the state
# systemd made for it (checkpoints under /var/lib/chime).
set(chime_deb ${PROJECT_SOURCE_DIR}/deploy/debian)
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA ${chime_deb}/chimed/conffiles
    ${chime_deb}/chimed/postinst ${chime_deb}/chimed/prerm
    ${chime_deb}/chimed/postrm)
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-chime)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}.999), python3-numpy, chimed ${chime_this}")
# chime.dataset and chimectl import/export read and write HDF5 with h5py.
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS python3-h5py)
# prerm: the bytecode an import as root leaves beside the module.
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA ${chime_deb}/python3-chime/prerm)
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "chime Python package: replay batches as zero-copy numpy views")

include(CPack)
