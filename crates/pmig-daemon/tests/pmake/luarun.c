/* pmig's pmake test: a minimal driver for the Lua library built by Makefile.
 * Usage: lua [-e] CHUNK...  runs each chunk in one state; the first error ends it. */
#include <stdio.h>
#include <string.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

int main(int argc, char **argv)
{
	lua_State *L = luaL_newstate();
	if (L == NULL) {
		fprintf(stderr, "luarun: out of memory\n");
		return 2;
	}
	luaL_openlibs(L);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-e") == 0)
			continue;
		if (luaL_dostring(L, argv[i]) != LUA_OK) {
			fprintf(stderr, "luarun: %s\n", lua_tostring(L, -1));
			lua_close(L);
			return 1;
		}
	}
	lua_close(L);
	return 0;
}
