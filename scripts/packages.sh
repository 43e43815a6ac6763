# ensure_package PACKAGE FILE WHAT installs Debian's PACKAGE when FILE is
# missing, so that apt-get stays out of the timed tests; when it cannot
# (no root, no apt-get), it says that WHAT will skip, and the tests say why.
ensure_package() {
  local package=$1 file=$2 what=$3
  [ -e "$file" ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! sudo -n true 2>/dev/null; then
      echo "NOTE: $what will skip: installing $package needs root" >&2
      return 0
    fi
    sudo="sudo -n"
  fi
  echo "installing $package from the Debian packages for $what..." >&2
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$package" >/dev/null; }; then
    echo "NOTE: $what will skip: apt-get could not install $package" >&2
  fi
}
