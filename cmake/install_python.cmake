# Run by `cmake --install` (install(CODE) in the top CMakeLists.txt), when the prefix is known: puts
# the ciuic Python package where that prefix's Python looks and writes ciuic/_installed.py, the path
# from the package to the prefix's libciuic.
#   /usr/local  lib/pythonX.Y/dist-packages  (Debian's Python looks there for local installs)
#   /usr        lib/python3/dist-packages    (Debian's own packages)
#   elsewhere   lib/pythonX.Y/site-packages  (a venv's layout; PYTHONPATH for other Pythons)
# CIUIC_INSTALL_PYTHONDIR, when set at configure time, wins. DESTDIR is honoured.
# In: CIUIC_PYTHON_VERSION, CIUIC_INSTALL_PYTHONDIR, CIUIC_INSTALL_LIBDIR, CIUIC_PYTHON_SOURCE.
set(_prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" _prefix "${_prefix}")
if(CIUIC_INSTALL_PYTHONDIR)
  set(_dir "${CIUIC_INSTALL_PYTHONDIR}")
elseif(_prefix STREQUAL "/usr/local")
  set(_dir "lib/python${CIUIC_PYTHON_VERSION}/dist-packages")
elseif(_prefix STREQUAL "/usr")
  set(_dir "lib/python3/dist-packages")
else()
  set(_dir "lib/python${CIUIC_PYTHON_VERSION}/site-packages")
endif()
set(_package "${_prefix}/${_dir}/ciuic")
file(RELATIVE_PATH _to_lib "${_package}" "${_prefix}/${CIUIC_INSTALL_LIBDIR}")
string(REGEX REPLACE "/+$" "" _to_lib "${_to_lib}")
file(INSTALL DESTINATION "${_prefix}/${_dir}" TYPE DIRECTORY FILES "${CIUIC_PYTHON_SOURCE}"
     FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
set(_installed "$ENV{DESTDIR}${_package}/_installed.py")
file(WRITE "${_installed}"
     "# Written by cmake --install: where this package finds libciuic.so, relative to the package.\n"
     "LIBRARY_DIR = \"${_to_lib}\"\n")
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_installed}")
if(_prefix STREQUAL "/usr/local" OR _prefix STREQUAL "/usr")
  message(STATUS "Python package: ${_package} (on the system Python's path)")
else()
  message(STATUS "Python package: ${_package} (PYTHONPATH=${_prefix}/${_dir} for a Python outside the prefix)")
endif()
