# Sourced by the .ci scripts: PATH for Go and a stable toolchain policy.
[[ -d /usr/local/go/bin ]] && export PATH="/usr/local/go/bin:${PATH}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
