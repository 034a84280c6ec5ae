// Package debpkg is how units that install software see and change a Debian or Ubuntu
// host's packages: which are installed (read from dpkg's status file, without running a
// program), and installing more with apt-get through the host's Runner.
package debpkg
