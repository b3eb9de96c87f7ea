static int f0(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 33);
        if (s % 95 == 0) s += (k << 3);
    }
    return s;
}
static int f1(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 89);
        if (s % 95 == 0) s += (k << 4);
    }
    return s;
}
static int f2(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 68);
        if (s % 4 == 0) s += (k << 0);
    }
    return s;
}
static int f3(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 60) ^ (y + 32);
        if (s % 84 == 0) s += (k << 4);
    }
    return s;
}
static int f4(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 21);
        if (s % 15 == 0) s += (k << 0);
    }
    return s;
}
static int f5(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 61);
        if (s % 32 == 0) s += (k << 6);
    }
    return s;
}
static int f6(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 70);
        if (s % 14 == 0) s += (k << 0);
    }
    return s;
}
static int f7(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 74) ^ (y + 32);
        if (s % 2 == 0) s += (k << 4);
    }
    return s;
}
static int f8(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 94) ^ (y + 28);
        if (s % 53 == 0) s += (k << 3);
    }
    return s;
}
static int f9(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 24);
        if (s % 99 == 0) s += (k << 1);
    }
    return s;
}
static int f10(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 21);
        if (s % 98 == 0) s += (k << 1);
    }
    return s;
}
static int f11(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 18);
        if (s % 80 == 0) s += (k << 3);
    }
    return s;
}
static int f12(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 57);
        if (s % 17 == 0) s += (k << 3);
    }
    return s;
}
static int f13(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 1);
        if (s % 1 == 0) s += (k << 3);
    }
    return s;
}
static int f14(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 28);
        if (s % 22 == 0) s += (k << 6);
    }
    return s;
}
static int f15(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 38);
        if (s % 41 == 0) s += (k << 1);
    }
    return s;
}
static int f16(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 70);
        if (s % 87 == 0) s += (k << 5);
    }
    return s;
}
static int f17(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 81) ^ (y + 27);
        if (s % 24 == 0) s += (k << 4);
    }
    return s;
}
static int f18(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 26);
        if (s % 50 == 0) s += (k << 5);
    }
    return s;
}
static int f19(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 3);
        if (s % 47 == 0) s += (k << 4);
    }
    return s;
}
static int f20(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 54) ^ (y + 22);
        if (s % 19 == 0) s += (k << 5);
    }
    return s;
}
static int f21(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 9);
        if (s % 43 == 0) s += (k << 6);
    }
    return s;
}
static int f22(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 78);
        if (s % 76 == 0) s += (k << 4);
    }
    return s;
}
static int f23(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 1) ^ (y + 77);
        if (s % 87 == 0) s += (k << 1);
    }
    return s;
}
static int f24(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 91) ^ (y + 44);
        if (s % 9 == 0) s += (k << 0);
    }
    return s;
}
static int f25(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 40) ^ (y + 46);
        if (s % 40 == 0) s += (k << 5);
    }
    return s;
}
static int f26(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 90);
        if (s % 41 == 0) s += (k << 6);
    }
    return s;
}
static int f27(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 24) ^ (y + 62);
        if (s % 61 == 0) s += (k << 3);
    }
    return s;
}
static int f28(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 91) ^ (y + 23);
        if (s % 8 == 0) s += (k << 0);
    }
    return s;
}
static int f29(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 33) ^ (y + 3);
        if (s % 96 == 0) s += (k << 5);
    }
    return s;
}
static int f30(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 52);
        if (s % 3 == 0) s += (k << 4);
    }
    return s;
}
static int f31(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 71) ^ (y + 54);
        if (s % 47 == 0) s += (k << 1);
    }
    return s;
}
static int f32(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 75);
        if (s % 2 == 0) s += (k << 0);
    }
    return s;
}
static int f33(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 58) ^ (y + 6);
        if (s % 91 == 0) s += (k << 2);
    }
    return s;
}
static int f34(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 24) ^ (y + 80);
        if (s % 26 == 0) s += (k << 3);
    }
    return s;
}
static int f35(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 16) ^ (y + 97);
        if (s % 32 == 0) s += (k << 2);
    }
    return s;
}
static int f36(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 60) ^ (y + 45);
        if (s % 66 == 0) s += (k << 4);
    }
    return s;
}
static int f37(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 68);
        if (s % 33 == 0) s += (k << 4);
    }
    return s;
}
static int f38(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 60) ^ (y + 14);
        if (s % 76 == 0) s += (k << 4);
    }
    return s;
}
static int f39(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 96) ^ (y + 48);
        if (s % 38 == 0) s += (k << 5);
    }
    return s;
}
static int f40(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 56);
        if (s % 12 == 0) s += (k << 5);
    }
    return s;
}
static int f41(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 44);
        if (s % 66 == 0) s += (k << 6);
    }
    return s;
}
static int f42(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 79) ^ (y + 47);
        if (s % 19 == 0) s += (k << 2);
    }
    return s;
}
static int f43(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 44) ^ (y + 36);
        if (s % 90 == 0) s += (k << 2);
    }
    return s;
}
static int f44(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 12);
        if (s % 40 == 0) s += (k << 0);
    }
    return s;
}
static int f45(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 41);
        if (s % 40 == 0) s += (k << 4);
    }
    return s;
}
static int f46(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 23) ^ (y + 11);
        if (s % 81 == 0) s += (k << 2);
    }
    return s;
}
static int f47(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 20) ^ (y + 93);
        if (s % 89 == 0) s += (k << 6);
    }
    return s;
}
static int f48(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 40) ^ (y + 62);
        if (s % 21 == 0) s += (k << 5);
    }
    return s;
}
static int f49(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 7);
        if (s % 11 == 0) s += (k << 2);
    }
    return s;
}
static int f50(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 69);
        if (s % 52 == 0) s += (k << 0);
    }
    return s;
}
static int f51(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 31);
        if (s % 95 == 0) s += (k << 5);
    }
    return s;
}
static int f52(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 45);
        if (s % 33 == 0) s += (k << 0);
    }
    return s;
}
static int f53(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 84);
        if (s % 54 == 0) s += (k << 3);
    }
    return s;
}
static int f54(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 8);
        if (s % 82 == 0) s += (k << 5);
    }
    return s;
}
static int f55(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 64);
        if (s % 43 == 0) s += (k << 5);
    }
    return s;
}
static int f56(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 17);
        if (s % 94 == 0) s += (k << 6);
    }
    return s;
}
static int f57(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 17);
        if (s % 81 == 0) s += (k << 3);
    }
    return s;
}
static int f58(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 53) ^ (y + 14);
        if (s % 22 == 0) s += (k << 4);
    }
    return s;
}
static int f59(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 48);
        if (s % 20 == 0) s += (k << 0);
    }
    return s;
}
static int f60(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 8) ^ (y + 54);
        if (s % 38 == 0) s += (k << 1);
    }
    return s;
}
static int f61(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 59);
        if (s % 80 == 0) s += (k << 5);
    }
    return s;
}
static int f62(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 67);
        if (s % 59 == 0) s += (k << 1);
    }
    return s;
}
static int f63(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 63) ^ (y + 89);
        if (s % 94 == 0) s += (k << 0);
    }
    return s;
}
static int f64(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 62);
        if (s % 36 == 0) s += (k << 6);
    }
    return s;
}
static int f65(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 61);
        if (s % 52 == 0) s += (k << 3);
    }
    return s;
}
static int f66(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 15);
        if (s % 49 == 0) s += (k << 5);
    }
    return s;
}
static int f67(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 69) ^ (y + 23);
        if (s % 81 == 0) s += (k << 6);
    }
    return s;
}
static int f68(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 64) ^ (y + 44);
        if (s % 24 == 0) s += (k << 1);
    }
    return s;
}
static int f69(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 63);
        if (s % 35 == 0) s += (k << 5);
    }
    return s;
}
static int f70(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 66) ^ (y + 71);
        if (s % 65 == 0) s += (k << 3);
    }
    return s;
}
static int f71(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 47) ^ (y + 9);
        if (s % 46 == 0) s += (k << 5);
    }
    return s;
}
static int f72(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 76);
        if (s % 85 == 0) s += (k << 5);
    }
    return s;
}
static int f73(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 98);
        if (s % 40 == 0) s += (k << 5);
    }
    return s;
}
static int f74(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 47) ^ (y + 72);
        if (s % 91 == 0) s += (k << 5);
    }
    return s;
}
static int f75(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 86) ^ (y + 36);
        if (s % 63 == 0) s += (k << 2);
    }
    return s;
}
static int f76(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 99);
        if (s % 89 == 0) s += (k << 6);
    }
    return s;
}
static int f77(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 92) ^ (y + 38);
        if (s % 44 == 0) s += (k << 1);
    }
    return s;
}
static int f78(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 23);
        if (s % 75 == 0) s += (k << 0);
    }
    return s;
}
static int f79(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 2) ^ (y + 61);
        if (s % 71 == 0) s += (k << 2);
    }
    return s;
}
static int f80(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 33) ^ (y + 42);
        if (s % 86 == 0) s += (k << 5);
    }
    return s;
}
static int f81(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 60);
        if (s % 37 == 0) s += (k << 1);
    }
    return s;
}
static int f82(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 65) ^ (y + 83);
        if (s % 87 == 0) s += (k << 2);
    }
    return s;
}
static int f83(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 45);
        if (s % 36 == 0) s += (k << 4);
    }
    return s;
}
static int f84(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 45);
        if (s % 95 == 0) s += (k << 6);
    }
    return s;
}
static int f85(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 53) ^ (y + 45);
        if (s % 23 == 0) s += (k << 4);
    }
    return s;
}
static int f86(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 58);
        if (s % 47 == 0) s += (k << 5);
    }
    return s;
}
static int f87(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 43) ^ (y + 67);
        if (s % 19 == 0) s += (k << 1);
    }
    return s;
}
static int f88(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 68) ^ (y + 22);
        if (s % 26 == 0) s += (k << 5);
    }
    return s;
}
static int f89(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 47) ^ (y + 62);
        if (s % 37 == 0) s += (k << 5);
    }
    return s;
}
static int f90(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 11);
        if (s % 93 == 0) s += (k << 5);
    }
    return s;
}
static int f91(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 86) ^ (y + 94);
        if (s % 54 == 0) s += (k << 2);
    }
    return s;
}
static int f92(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 79);
        if (s % 75 == 0) s += (k << 1);
    }
    return s;
}
static int f93(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 86);
        if (s % 54 == 0) s += (k << 4);
    }
    return s;
}
static int f94(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 80);
        if (s % 71 == 0) s += (k << 4);
    }
    return s;
}
static int f95(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 82) ^ (y + 35);
        if (s % 93 == 0) s += (k << 5);
    }
    return s;
}
static int f96(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 4) ^ (y + 26);
        if (s % 21 == 0) s += (k << 4);
    }
    return s;
}
static int f97(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 76) ^ (y + 57);
        if (s % 80 == 0) s += (k << 6);
    }
    return s;
}
static int f98(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 24);
        if (s % 29 == 0) s += (k << 0);
    }
    return s;
}
static int f99(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 98) ^ (y + 88);
        if (s % 24 == 0) s += (k << 0);
    }
    return s;
}
static int f100(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 81) ^ (y + 92);
        if (s % 6 == 0) s += (k << 4);
    }
    return s;
}
static int f101(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 61) ^ (y + 29);
        if (s % 22 == 0) s += (k << 5);
    }
    return s;
}
static int f102(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 18);
        if (s % 15 == 0) s += (k << 0);
    }
    return s;
}
static int f103(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 24);
        if (s % 62 == 0) s += (k << 6);
    }
    return s;
}
static int f104(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 25) ^ (y + 71);
        if (s % 5 == 0) s += (k << 4);
    }
    return s;
}
static int f105(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 54) ^ (y + 60);
        if (s % 45 == 0) s += (k << 5);
    }
    return s;
}
static int f106(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 85);
        if (s % 79 == 0) s += (k << 0);
    }
    return s;
}
static int f107(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 76);
        if (s % 27 == 0) s += (k << 3);
    }
    return s;
}
static int f108(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 31) ^ (y + 92);
        if (s % 48 == 0) s += (k << 3);
    }
    return s;
}
static int f109(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 1) ^ (y + 45);
        if (s % 52 == 0) s += (k << 1);
    }
    return s;
}
static int f110(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 53);
        if (s % 15 == 0) s += (k << 1);
    }
    return s;
}
static int f111(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 71);
        if (s % 48 == 0) s += (k << 5);
    }
    return s;
}
static int f112(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 71);
        if (s % 79 == 0) s += (k << 5);
    }
    return s;
}
static int f113(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 13);
        if (s % 38 == 0) s += (k << 4);
    }
    return s;
}
static int f114(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 66);
        if (s % 44 == 0) s += (k << 0);
    }
    return s;
}
static int f115(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 75) ^ (y + 38);
        if (s % 46 == 0) s += (k << 5);
    }
    return s;
}
static int f116(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 54);
        if (s % 53 == 0) s += (k << 3);
    }
    return s;
}
static int f117(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 83);
        if (s % 69 == 0) s += (k << 3);
    }
    return s;
}
static int f118(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 60);
        if (s % 19 == 0) s += (k << 6);
    }
    return s;
}
static int f119(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 21) ^ (y + 77);
        if (s % 49 == 0) s += (k << 0);
    }
    return s;
}
static int f120(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 62);
        if (s % 26 == 0) s += (k << 3);
    }
    return s;
}
static int f121(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 78);
        if (s % 12 == 0) s += (k << 4);
    }
    return s;
}
static int f122(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 45) ^ (y + 85);
        if (s % 1 == 0) s += (k << 3);
    }
    return s;
}
static int f123(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 14);
        if (s % 42 == 0) s += (k << 0);
    }
    return s;
}
static int f124(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 79);
        if (s % 70 == 0) s += (k << 3);
    }
    return s;
}
static int f125(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 42);
        if (s % 81 == 0) s += (k << 5);
    }
    return s;
}
static int f126(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 49);
        if (s % 55 == 0) s += (k << 3);
    }
    return s;
}
static int f127(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 29);
        if (s % 64 == 0) s += (k << 0);
    }
    return s;
}
static int f128(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 62);
        if (s % 91 == 0) s += (k << 3);
    }
    return s;
}
static int f129(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 50);
        if (s % 21 == 0) s += (k << 0);
    }
    return s;
}
static int f130(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 77);
        if (s % 34 == 0) s += (k << 0);
    }
    return s;
}
static int f131(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 95) ^ (y + 39);
        if (s % 64 == 0) s += (k << 4);
    }
    return s;
}
static int f132(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 33) ^ (y + 54);
        if (s % 3 == 0) s += (k << 5);
    }
    return s;
}
static int f133(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 40);
        if (s % 63 == 0) s += (k << 6);
    }
    return s;
}
static int f134(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 37) ^ (y + 19);
        if (s % 62 == 0) s += (k << 2);
    }
    return s;
}
static int f135(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 4) ^ (y + 16);
        if (s % 85 == 0) s += (k << 4);
    }
    return s;
}
static int f136(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 57);
        if (s % 32 == 0) s += (k << 3);
    }
    return s;
}
static int f137(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 6);
        if (s % 18 == 0) s += (k << 3);
    }
    return s;
}
static int f138(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 2);
        if (s % 62 == 0) s += (k << 2);
    }
    return s;
}
static int f139(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 69) ^ (y + 72);
        if (s % 36 == 0) s += (k << 6);
    }
    return s;
}
static int f140(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 32) ^ (y + 61);
        if (s % 5 == 0) s += (k << 4);
    }
    return s;
}
static int f141(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 32) ^ (y + 63);
        if (s % 35 == 0) s += (k << 4);
    }
    return s;
}
static int f142(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 20) ^ (y + 93);
        if (s % 37 == 0) s += (k << 6);
    }
    return s;
}
static int f143(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 64);
        if (s % 78 == 0) s += (k << 3);
    }
    return s;
}
static int f144(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 61) ^ (y + 67);
        if (s % 83 == 0) s += (k << 5);
    }
    return s;
}
static int f145(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 78) ^ (y + 96);
        if (s % 16 == 0) s += (k << 1);
    }
    return s;
}
static int f146(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 98);
        if (s % 17 == 0) s += (k << 3);
    }
    return s;
}
static int f147(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 37);
        if (s % 69 == 0) s += (k << 4);
    }
    return s;
}
static int f148(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 91) ^ (y + 44);
        if (s % 79 == 0) s += (k << 0);
    }
    return s;
}
static int f149(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 94);
        if (s % 68 == 0) s += (k << 3);
    }
    return s;
}
static int f150(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 4) ^ (y + 60);
        if (s % 45 == 0) s += (k << 4);
    }
    return s;
}
static int f151(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 47) ^ (y + 88);
        if (s % 96 == 0) s += (k << 5);
    }
    return s;
}
static int f152(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 76) ^ (y + 17);
        if (s % 5 == 0) s += (k << 6);
    }
    return s;
}
static int f153(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 1) ^ (y + 33);
        if (s % 71 == 0) s += (k << 1);
    }
    return s;
}
static int f154(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 88);
        if (s % 14 == 0) s += (k << 3);
    }
    return s;
}
static int f155(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 70);
        if (s % 25 == 0) s += (k << 4);
    }
    return s;
}
static int f156(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 2) ^ (y + 55);
        if (s % 55 == 0) s += (k << 2);
    }
    return s;
}
static int f157(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 74);
        if (s % 89 == 0) s += (k << 0);
    }
    return s;
}
static int f158(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 91) ^ (y + 81);
        if (s % 84 == 0) s += (k << 0);
    }
    return s;
}
static int f159(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 50);
        if (s % 61 == 0) s += (k << 6);
    }
    return s;
}
static int f160(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 88);
        if (s % 93 == 0) s += (k << 2);
    }
    return s;
}
static int f161(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 38);
        if (s % 60 == 0) s += (k << 5);
    }
    return s;
}
static int f162(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 98) ^ (y + 9);
        if (s % 39 == 0) s += (k << 0);
    }
    return s;
}
static int f163(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 1) ^ (y + 89);
        if (s % 56 == 0) s += (k << 1);
    }
    return s;
}
static int f164(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 75) ^ (y + 37);
        if (s % 83 == 0) s += (k << 5);
    }
    return s;
}
static int f165(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 61) ^ (y + 40);
        if (s % 19 == 0) s += (k << 5);
    }
    return s;
}
static int f166(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 62);
        if (s % 89 == 0) s += (k << 1);
    }
    return s;
}
static int f167(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 71) ^ (y + 64);
        if (s % 43 == 0) s += (k << 1);
    }
    return s;
}
static int f168(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 69) ^ (y + 20);
        if (s % 55 == 0) s += (k << 6);
    }
    return s;
}
static int f169(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 75) ^ (y + 70);
        if (s % 7 == 0) s += (k << 5);
    }
    return s;
}
static int f170(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 9) ^ (y + 94);
        if (s % 30 == 0) s += (k << 2);
    }
    return s;
}
static int f171(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 35) ^ (y + 11);
        if (s % 9 == 0) s += (k << 0);
    }
    return s;
}
static int f172(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 85) ^ (y + 4);
        if (s % 43 == 0) s += (k << 1);
    }
    return s;
}
static int f173(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 55);
        if (s % 9 == 0) s += (k << 2);
    }
    return s;
}
static int f174(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 52) ^ (y + 90);
        if (s % 63 == 0) s += (k << 3);
    }
    return s;
}
static int f175(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 16);
        if (s % 16 == 0) s += (k << 0);
    }
    return s;
}
static int f176(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 29) ^ (y + 79);
        if (s % 83 == 0) s += (k << 1);
    }
    return s;
}
static int f177(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 15) ^ (y + 92);
        if (s % 18 == 0) s += (k << 1);
    }
    return s;
}
static int f178(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 91);
        if (s % 57 == 0) s += (k << 3);
    }
    return s;
}
static int f179(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 20) ^ (y + 24);
        if (s % 79 == 0) s += (k << 6);
    }
    return s;
}
static int f180(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 24) ^ (y + 53);
        if (s % 21 == 0) s += (k << 3);
    }
    return s;
}
static int f181(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 9) ^ (y + 80);
        if (s % 28 == 0) s += (k << 2);
    }
    return s;
}
static int f182(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 6) ^ (y + 72);
        if (s % 14 == 0) s += (k << 6);
    }
    return s;
}
static int f183(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 85) ^ (y + 49);
        if (s % 96 == 0) s += (k << 1);
    }
    return s;
}
static int f184(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 36);
        if (s % 8 == 0) s += (k << 3);
    }
    return s;
}
static int f185(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 74) ^ (y + 74);
        if (s % 16 == 0) s += (k << 4);
    }
    return s;
}
static int f186(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 96) ^ (y + 52);
        if (s % 80 == 0) s += (k << 5);
    }
    return s;
}
static int f187(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 2);
        if (s % 56 == 0) s += (k << 4);
    }
    return s;
}
static int f188(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 41);
        if (s % 88 == 0) s += (k << 5);
    }
    return s;
}
static int f189(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 63);
        if (s % 63 == 0) s += (k << 0);
    }
    return s;
}
static int f190(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 84);
        if (s % 48 == 0) s += (k << 4);
    }
    return s;
}
static int f191(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 8) ^ (y + 18);
        if (s % 90 == 0) s += (k << 1);
    }
    return s;
}
static int f192(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 20);
        if (s % 73 == 0) s += (k << 3);
    }
    return s;
}
static int f193(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 81) ^ (y + 87);
        if (s % 65 == 0) s += (k << 4);
    }
    return s;
}
static int f194(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 72);
        if (s % 71 == 0) s += (k << 3);
    }
    return s;
}
static int f195(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 29);
        if (s % 34 == 0) s += (k << 3);
    }
    return s;
}
static int f196(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 9) ^ (y + 71);
        if (s % 31 == 0) s += (k << 2);
    }
    return s;
}
static int f197(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 33) ^ (y + 97);
        if (s % 37 == 0) s += (k << 5);
    }
    return s;
}
static int f198(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 18);
        if (s % 31 == 0) s += (k << 4);
    }
    return s;
}
static int f199(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 59);
        if (s % 95 == 0) s += (k << 6);
    }
    return s;
}
static int f200(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 23);
        if (s % 17 == 0) s += (k << 1);
    }
    return s;
}
static int f201(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 92) ^ (y + 3);
        if (s % 84 == 0) s += (k << 1);
    }
    return s;
}
static int f202(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 44) ^ (y + 11);
        if (s % 74 == 0) s += (k << 2);
    }
    return s;
}
static int f203(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 86) ^ (y + 5);
        if (s % 12 == 0) s += (k << 2);
    }
    return s;
}
static int f204(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 16) ^ (y + 65);
        if (s % 77 == 0) s += (k << 2);
    }
    return s;
}
static int f205(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 31);
        if (s % 50 == 0) s += (k << 3);
    }
    return s;
}
static int f206(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 60) ^ (y + 62);
        if (s % 42 == 0) s += (k << 4);
    }
    return s;
}
static int f207(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 68);
        if (s % 4 == 0) s += (k << 0);
    }
    return s;
}
static int f208(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 93);
        if (s % 50 == 0) s += (k << 0);
    }
    return s;
}
static int f209(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 20);
        if (s % 55 == 0) s += (k << 0);
    }
    return s;
}
static int f210(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 29);
        if (s % 96 == 0) s += (k << 4);
    }
    return s;
}
static int f211(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 15) ^ (y + 11);
        if (s % 86 == 0) s += (k << 1);
    }
    return s;
}
static int f212(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 63) ^ (y + 28);
        if (s % 18 == 0) s += (k << 0);
    }
    return s;
}
static int f213(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 90) ^ (y + 80);
        if (s % 49 == 0) s += (k << 6);
    }
    return s;
}
static int f214(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 31);
        if (s % 38 == 0) s += (k << 4);
    }
    return s;
}
static int f215(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 43) ^ (y + 79);
        if (s % 91 == 0) s += (k << 1);
    }
    return s;
}
static int f216(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 45) ^ (y + 50);
        if (s % 49 == 0) s += (k << 3);
    }
    return s;
}
static int f217(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 93);
        if (s % 46 == 0) s += (k << 4);
    }
    return s;
}
static int f218(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 38);
        if (s % 81 == 0) s += (k << 6);
    }
    return s;
}
static int f219(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 47);
        if (s % 67 == 0) s += (k << 0);
    }
    return s;
}
static int f220(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 76);
        if (s % 74 == 0) s += (k << 5);
    }
    return s;
}
static int f221(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 28) ^ (y + 95);
        if (s % 24 == 0) s += (k << 0);
    }
    return s;
}
static int f222(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 9);
        if (s % 13 == 0) s += (k << 2);
    }
    return s;
}
static int f223(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 5);
        if (s % 24 == 0) s += (k << 5);
    }
    return s;
}
static int f224(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 26);
        if (s % 6 == 0) s += (k << 5);
    }
    return s;
}
static int f225(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 63) ^ (y + 62);
        if (s % 85 == 0) s += (k << 0);
    }
    return s;
}
static int f226(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 98) ^ (y + 45);
        if (s % 1 == 0) s += (k << 0);
    }
    return s;
}
static int f227(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 55) ^ (y + 61);
        if (s % 39 == 0) s += (k << 6);
    }
    return s;
}
static int f228(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 55);
        if (s % 42 == 0) s += (k << 3);
    }
    return s;
}
static int f229(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 60) ^ (y + 60);
        if (s % 13 == 0) s += (k << 4);
    }
    return s;
}
static int f230(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 25) ^ (y + 20);
        if (s % 84 == 0) s += (k << 4);
    }
    return s;
}
static int f231(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 21) ^ (y + 10);
        if (s % 48 == 0) s += (k << 0);
    }
    return s;
}
static int f232(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 61);
        if (s % 20 == 0) s += (k << 1);
    }
    return s;
}
static int f233(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 71) ^ (y + 33);
        if (s % 15 == 0) s += (k << 1);
    }
    return s;
}
static int f234(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 21);
        if (s % 97 == 0) s += (k << 1);
    }
    return s;
}
static int f235(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 37) ^ (y + 87);
        if (s % 31 == 0) s += (k << 2);
    }
    return s;
}
static int f236(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 62);
        if (s % 5 == 0) s += (k << 5);
    }
    return s;
}
static int f237(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 45) ^ (y + 97);
        if (s % 48 == 0) s += (k << 3);
    }
    return s;
}
static int f238(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 8);
        if (s % 89 == 0) s += (k << 6);
    }
    return s;
}
static int f239(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 87);
        if (s % 59 == 0) s += (k << 3);
    }
    return s;
}
static int f240(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 61) ^ (y + 20);
        if (s % 16 == 0) s += (k << 5);
    }
    return s;
}
static int f241(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 86) ^ (y + 42);
        if (s % 38 == 0) s += (k << 2);
    }
    return s;
}
static int f242(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 87);
        if (s % 31 == 0) s += (k << 3);
    }
    return s;
}
static int f243(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 94) ^ (y + 21);
        if (s % 5 == 0) s += (k << 3);
    }
    return s;
}
static int f244(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 92);
        if (s % 4 == 0) s += (k << 5);
    }
    return s;
}
static int f245(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 74) ^ (y + 30);
        if (s % 85 == 0) s += (k << 4);
    }
    return s;
}
static int f246(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 11) ^ (y + 80);
        if (s % 52 == 0) s += (k << 4);
    }
    return s;
}
static int f247(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 91) ^ (y + 47);
        if (s % 88 == 0) s += (k << 0);
    }
    return s;
}
static int f248(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 40) ^ (y + 24);
        if (s % 60 == 0) s += (k << 5);
    }
    return s;
}
static int f249(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 47) ^ (y + 37);
        if (s % 9 == 0) s += (k << 5);
    }
    return s;
}
static int f250(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 94) ^ (y + 92);
        if (s % 60 == 0) s += (k << 3);
    }
    return s;
}
static int f251(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 21) ^ (y + 31);
        if (s % 23 == 0) s += (k << 0);
    }
    return s;
}
static int f252(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 87) ^ (y + 27);
        if (s % 6 == 0) s += (k << 3);
    }
    return s;
}
static int f253(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 78);
        if (s % 56 == 0) s += (k << 6);
    }
    return s;
}
static int f254(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 35);
        if (s % 1 == 0) s += (k << 2);
    }
    return s;
}
static int f255(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 60) ^ (y + 8);
        if (s % 58 == 0) s += (k << 4);
    }
    return s;
}
static int f256(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 53);
        if (s % 22 == 0) s += (k << 4);
    }
    return s;
}
static int f257(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 6) ^ (y + 5);
        if (s % 71 == 0) s += (k << 6);
    }
    return s;
}
static int f258(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 73);
        if (s % 45 == 0) s += (k << 4);
    }
    return s;
}
static int f259(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 13) ^ (y + 92);
        if (s % 10 == 0) s += (k << 6);
    }
    return s;
}
static int f260(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 31) ^ (y + 63);
        if (s % 12 == 0) s += (k << 3);
    }
    return s;
}
static int f261(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 61) ^ (y + 7);
        if (s % 88 == 0) s += (k << 5);
    }
    return s;
}
static int f262(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 32) ^ (y + 83);
        if (s % 7 == 0) s += (k << 4);
    }
    return s;
}
static int f263(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 64) ^ (y + 51);
        if (s % 8 == 0) s += (k << 1);
    }
    return s;
}
static int f264(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 33);
        if (s % 53 == 0) s += (k << 0);
    }
    return s;
}
static int f265(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 58) ^ (y + 40);
        if (s % 82 == 0) s += (k << 2);
    }
    return s;
}
static int f266(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 5);
        if (s % 25 == 0) s += (k << 0);
    }
    return s;
}
static int f267(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 23) ^ (y + 90);
        if (s % 66 == 0) s += (k << 2);
    }
    return s;
}
static int f268(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 82) ^ (y + 52);
        if (s % 25 == 0) s += (k << 5);
    }
    return s;
}
static int f269(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 69) ^ (y + 30);
        if (s % 11 == 0) s += (k << 6);
    }
    return s;
}
static int f270(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 14);
        if (s % 12 == 0) s += (k << 6);
    }
    return s;
}
static int f271(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 21);
        if (s % 77 == 0) s += (k << 0);
    }
    return s;
}
static int f272(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 94);
        if (s % 28 == 0) s += (k << 3);
    }
    return s;
}
static int f273(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 3);
        if (s % 57 == 0) s += (k << 3);
    }
    return s;
}
static int f274(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 46);
        if (s % 63 == 0) s += (k << 0);
    }
    return s;
}
static int f275(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 55) ^ (y + 74);
        if (s % 99 == 0) s += (k << 6);
    }
    return s;
}
static int f276(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 67);
        if (s % 81 == 0) s += (k << 0);
    }
    return s;
}
static int f277(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 93);
        if (s % 2 == 0) s += (k << 3);
    }
    return s;
}
static int f278(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 97) ^ (y + 40);
        if (s % 89 == 0) s += (k << 6);
    }
    return s;
}
static int f279(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 58) ^ (y + 29);
        if (s % 71 == 0) s += (k << 2);
    }
    return s;
}
static int f280(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 15) ^ (y + 18);
        if (s % 40 == 0) s += (k << 1);
    }
    return s;
}
static int f281(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 12);
        if (s % 99 == 0) s += (k << 6);
    }
    return s;
}
static int f282(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 52);
        if (s % 41 == 0) s += (k << 6);
    }
    return s;
}
static int f283(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 17);
        if (s % 69 == 0) s += (k << 3);
    }
    return s;
}
static int f284(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 11) ^ (y + 61);
        if (s % 32 == 0) s += (k << 4);
    }
    return s;
}
static int f285(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 90) ^ (y + 11);
        if (s % 55 == 0) s += (k << 6);
    }
    return s;
}
static int f286(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 74) ^ (y + 86);
        if (s % 32 == 0) s += (k << 4);
    }
    return s;
}
static int f287(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 8);
        if (s % 64 == 0) s += (k << 1);
    }
    return s;
}
static int f288(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 90) ^ (y + 32);
        if (s % 7 == 0) s += (k << 6);
    }
    return s;
}
static int f289(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 91) ^ (y + 26);
        if (s % 37 == 0) s += (k << 0);
    }
    return s;
}
static int f290(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 13);
        if (s % 10 == 0) s += (k << 6);
    }
    return s;
}
static int f291(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 54) ^ (y + 99);
        if (s % 41 == 0) s += (k << 5);
    }
    return s;
}
static int f292(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 97);
        if (s % 99 == 0) s += (k << 0);
    }
    return s;
}
static int f293(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 72) ^ (y + 1);
        if (s % 37 == 0) s += (k << 2);
    }
    return s;
}
static int f294(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 98);
        if (s % 17 == 0) s += (k << 0);
    }
    return s;
}
static int f295(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 74) ^ (y + 4);
        if (s % 57 == 0) s += (k << 4);
    }
    return s;
}
static int f296(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 89);
        if (s % 84 == 0) s += (k << 5);
    }
    return s;
}
static int f297(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 94);
        if (s % 7 == 0) s += (k << 3);
    }
    return s;
}
static int f298(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 90) ^ (y + 55);
        if (s % 35 == 0) s += (k << 6);
    }
    return s;
}
static int f299(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 49);
        if (s % 72 == 0) s += (k << 0);
    }
    return s;
}
static int f300(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 42);
        if (s % 9 == 0) s += (k << 3);
    }
    return s;
}
static int f301(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 40) ^ (y + 22);
        if (s % 18 == 0) s += (k << 5);
    }
    return s;
}
static int f302(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 64);
        if (s % 87 == 0) s += (k << 6);
    }
    return s;
}
static int f303(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 42) ^ (y + 37);
        if (s % 5 == 0) s += (k << 0);
    }
    return s;
}
static int f304(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 9) ^ (y + 70);
        if (s % 98 == 0) s += (k << 2);
    }
    return s;
}
static int f305(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 95) ^ (y + 72);
        if (s % 4 == 0) s += (k << 4);
    }
    return s;
}
static int f306(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 4) ^ (y + 16);
        if (s % 7 == 0) s += (k << 4);
    }
    return s;
}
static int f307(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 46);
        if (s % 56 == 0) s += (k << 3);
    }
    return s;
}
static int f308(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 79);
        if (s % 3 == 0) s += (k << 6);
    }
    return s;
}
static int f309(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 30) ^ (y + 68);
        if (s % 55 == 0) s += (k << 2);
    }
    return s;
}
static int f310(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 47);
        if (s % 26 == 0) s += (k << 3);
    }
    return s;
}
static int f311(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 43) ^ (y + 46);
        if (s % 2 == 0) s += (k << 1);
    }
    return s;
}
static int f312(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 21) ^ (y + 75);
        if (s % 80 == 0) s += (k << 0);
    }
    return s;
}
static int f313(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 21) ^ (y + 94);
        if (s % 13 == 0) s += (k << 0);
    }
    return s;
}
static int f314(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 35) ^ (y + 68);
        if (s % 78 == 0) s += (k << 0);
    }
    return s;
}
static int f315(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 81);
        if (s % 91 == 0) s += (k << 1);
    }
    return s;
}
static int f316(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 58);
        if (s % 98 == 0) s += (k << 5);
    }
    return s;
}
static int f317(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 55);
        if (s % 16 == 0) s += (k << 0);
    }
    return s;
}
static int f318(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 43) ^ (y + 41);
        if (s % 58 == 0) s += (k << 1);
    }
    return s;
}
static int f319(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 30) ^ (y + 60);
        if (s % 77 == 0) s += (k << 2);
    }
    return s;
}
static int f320(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 22);
        if (s % 57 == 0) s += (k << 0);
    }
    return s;
}
static int f321(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 99);
        if (s % 86 == 0) s += (k << 0);
    }
    return s;
}
static int f322(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 21) ^ (y + 69);
        if (s % 61 == 0) s += (k << 0);
    }
    return s;
}
static int f323(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 63) ^ (y + 77);
        if (s % 1 == 0) s += (k << 0);
    }
    return s;
}
static int f324(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 17);
        if (s % 54 == 0) s += (k << 0);
    }
    return s;
}
static int f325(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 7);
        if (s % 27 == 0) s += (k << 4);
    }
    return s;
}
static int f326(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 1) ^ (y + 5);
        if (s % 74 == 0) s += (k << 1);
    }
    return s;
}
static int f327(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 31) ^ (y + 62);
        if (s % 91 == 0) s += (k << 3);
    }
    return s;
}
static int f328(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 51);
        if (s % 60 == 0) s += (k << 4);
    }
    return s;
}
static int f329(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 28) ^ (y + 26);
        if (s % 36 == 0) s += (k << 0);
    }
    return s;
}
static int f330(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 39);
        if (s % 72 == 0) s += (k << 5);
    }
    return s;
}
static int f331(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 46);
        if (s % 98 == 0) s += (k << 4);
    }
    return s;
}
static int f332(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 97) ^ (y + 31);
        if (s % 47 == 0) s += (k << 6);
    }
    return s;
}
static int f333(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 32);
        if (s % 85 == 0) s += (k << 4);
    }
    return s;
}
static int f334(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 8) ^ (y + 80);
        if (s % 64 == 0) s += (k << 1);
    }
    return s;
}
static int f335(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 52) ^ (y + 45);
        if (s % 19 == 0) s += (k << 3);
    }
    return s;
}
static int f336(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 31);
        if (s % 63 == 0) s += (k << 5);
    }
    return s;
}
static int f337(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 5);
        if (s % 13 == 0) s += (k << 0);
    }
    return s;
}
static int f338(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 51);
        if (s % 13 == 0) s += (k << 1);
    }
    return s;
}
static int f339(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 97) ^ (y + 92);
        if (s % 37 == 0) s += (k << 6);
    }
    return s;
}
static int f340(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 97);
        if (s % 42 == 0) s += (k << 5);
    }
    return s;
}
static int f341(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 88);
        if (s % 61 == 0) s += (k << 6);
    }
    return s;
}
static int f342(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 69) ^ (y + 80);
        if (s % 12 == 0) s += (k << 6);
    }
    return s;
}
static int f343(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 49);
        if (s % 89 == 0) s += (k << 5);
    }
    return s;
}
static int f344(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 2) ^ (y + 14);
        if (s % 66 == 0) s += (k << 2);
    }
    return s;
}
static int f345(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 78) ^ (y + 76);
        if (s % 80 == 0) s += (k << 1);
    }
    return s;
}
static int f346(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 24) ^ (y + 50);
        if (s % 3 == 0) s += (k << 3);
    }
    return s;
}
static int f347(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 87);
        if (s % 4 == 0) s += (k << 6);
    }
    return s;
}
static int f348(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 79) ^ (y + 40);
        if (s % 66 == 0) s += (k << 2);
    }
    return s;
}
static int f349(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 65);
        if (s % 61 == 0) s += (k << 1);
    }
    return s;
}
static int f350(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 91);
        if (s % 89 == 0) s += (k << 0);
    }
    return s;
}
static int f351(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 52) ^ (y + 58);
        if (s % 75 == 0) s += (k << 3);
    }
    return s;
}
static int f352(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 72);
        if (s % 86 == 0) s += (k << 5);
    }
    return s;
}
static int f353(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 8) ^ (y + 69);
        if (s % 19 == 0) s += (k << 1);
    }
    return s;
}
static int f354(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 54) ^ (y + 47);
        if (s % 76 == 0) s += (k << 5);
    }
    return s;
}
static int f355(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 87);
        if (s % 99 == 0) s += (k << 3);
    }
    return s;
}
static int f356(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 27);
        if (s % 37 == 0) s += (k << 4);
    }
    return s;
}
static int f357(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 37) ^ (y + 10);
        if (s % 4 == 0) s += (k << 2);
    }
    return s;
}
static int f358(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 46);
        if (s % 79 == 0) s += (k << 5);
    }
    return s;
}
static int f359(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 75) ^ (y + 98);
        if (s % 92 == 0) s += (k << 5);
    }
    return s;
}
static int f360(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 53) ^ (y + 40);
        if (s % 2 == 0) s += (k << 4);
    }
    return s;
}
static int f361(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 92);
        if (s % 31 == 0) s += (k << 1);
    }
    return s;
}
static int f362(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 5);
        if (s % 97 == 0) s += (k << 3);
    }
    return s;
}
static int f363(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 86);
        if (s % 39 == 0) s += (k << 5);
    }
    return s;
}
static int f364(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 45) ^ (y + 89);
        if (s % 95 == 0) s += (k << 3);
    }
    return s;
}
static int f365(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 78) ^ (y + 79);
        if (s % 72 == 0) s += (k << 1);
    }
    return s;
}
static int f366(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 62);
        if (s % 67 == 0) s += (k << 6);
    }
    return s;
}
static int f367(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 16);
        if (s % 31 == 0) s += (k << 5);
    }
    return s;
}
static int f368(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 44) ^ (y + 70);
        if (s % 55 == 0) s += (k << 2);
    }
    return s;
}
static int f369(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 1);
        if (s % 86 == 0) s += (k << 2);
    }
    return s;
}
static int f370(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 49);
        if (s % 23 == 0) s += (k << 1);
    }
    return s;
}
static int f371(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 97) ^ (y + 84);
        if (s % 68 == 0) s += (k << 6);
    }
    return s;
}
static int f372(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 87);
        if (s % 79 == 0) s += (k << 6);
    }
    return s;
}
static int f373(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 42) ^ (y + 50);
        if (s % 42 == 0) s += (k << 0);
    }
    return s;
}
static int f374(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 89);
        if (s % 71 == 0) s += (k << 0);
    }
    return s;
}
static int f375(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 92);
        if (s % 48 == 0) s += (k << 5);
    }
    return s;
}
static int f376(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 32) ^ (y + 13);
        if (s % 28 == 0) s += (k << 4);
    }
    return s;
}
static int f377(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 40);
        if (s % 35 == 0) s += (k << 3);
    }
    return s;
}
static int f378(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 10);
        if (s % 22 == 0) s += (k << 3);
    }
    return s;
}
static int f379(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 81);
        if (s % 53 == 0) s += (k << 3);
    }
    return s;
}
static int f380(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 99) ^ (y + 24);
        if (s % 29 == 0) s += (k << 1);
    }
    return s;
}
static int f381(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 9);
        if (s % 73 == 0) s += (k << 0);
    }
    return s;
}
static int f382(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 81);
        if (s % 82 == 0) s += (k << 3);
    }
    return s;
}
static int f383(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 94);
        if (s % 53 == 0) s += (k << 0);
    }
    return s;
}
static int f384(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 54) ^ (y + 30);
        if (s % 55 == 0) s += (k << 5);
    }
    return s;
}
static int f385(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 68);
        if (s % 77 == 0) s += (k << 6);
    }
    return s;
}
static int f386(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 32) ^ (y + 39);
        if (s % 54 == 0) s += (k << 4);
    }
    return s;
}
static int f387(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 11);
        if (s % 78 == 0) s += (k << 1);
    }
    return s;
}
static int f388(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 43) ^ (y + 24);
        if (s % 54 == 0) s += (k << 1);
    }
    return s;
}
static int f389(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 4) ^ (y + 20);
        if (s % 15 == 0) s += (k << 4);
    }
    return s;
}
static int f390(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 73);
        if (s % 72 == 0) s += (k << 3);
    }
    return s;
}
static int f391(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 78) ^ (y + 73);
        if (s % 24 == 0) s += (k << 1);
    }
    return s;
}
static int f392(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 25);
        if (s % 42 == 0) s += (k << 0);
    }
    return s;
}
static int f393(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 14);
        if (s % 83 == 0) s += (k << 0);
    }
    return s;
}
static int f394(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 89) ^ (y + 43);
        if (s % 94 == 0) s += (k << 5);
    }
    return s;
}
static int f395(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 8);
        if (s % 63 == 0) s += (k << 3);
    }
    return s;
}
static int f396(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 67);
        if (s % 10 == 0) s += (k << 4);
    }
    return s;
}
static int f397(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 41) ^ (y + 25);
        if (s % 60 == 0) s += (k << 6);
    }
    return s;
}
static int f398(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 50);
        if (s % 30 == 0) s += (k << 6);
    }
    return s;
}
static int f399(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 90) ^ (y + 79);
        if (s % 62 == 0) s += (k << 6);
    }
    return s;
}
static int f400(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 13) ^ (y + 1);
        if (s % 25 == 0) s += (k << 6);
    }
    return s;
}
static int f401(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 87) ^ (y + 21);
        if (s % 15 == 0) s += (k << 3);
    }
    return s;
}
static int f402(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 43);
        if (s % 20 == 0) s += (k << 5);
    }
    return s;
}
static int f403(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 79);
        if (s % 98 == 0) s += (k << 6);
    }
    return s;
}
static int f404(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 74);
        if (s % 98 == 0) s += (k << 0);
    }
    return s;
}
static int f405(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 57) ^ (y + 95);
        if (s % 42 == 0) s += (k << 1);
    }
    return s;
}
static int f406(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 99) ^ (y + 24);
        if (s % 92 == 0) s += (k << 1);
    }
    return s;
}
static int f407(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 71) ^ (y + 75);
        if (s % 81 == 0) s += (k << 1);
    }
    return s;
}
static int f408(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 47);
        if (s % 14 == 0) s += (k << 0);
    }
    return s;
}
static int f409(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 9) ^ (y + 26);
        if (s % 27 == 0) s += (k << 2);
    }
    return s;
}
static int f410(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 42) ^ (y + 48);
        if (s % 23 == 0) s += (k << 0);
    }
    return s;
}
static int f411(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 88);
        if (s % 96 == 0) s += (k << 3);
    }
    return s;
}
static int f412(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 98) ^ (y + 11);
        if (s % 32 == 0) s += (k << 0);
    }
    return s;
}
static int f413(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 52) ^ (y + 70);
        if (s % 60 == 0) s += (k << 3);
    }
    return s;
}
static int f414(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 1);
        if (s % 16 == 0) s += (k << 0);
    }
    return s;
}
static int f415(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 48);
        if (s % 17 == 0) s += (k << 0);
    }
    return s;
}
static int f416(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 1);
        if (s % 64 == 0) s += (k << 4);
    }
    return s;
}
static int f417(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 44);
        if (s % 96 == 0) s += (k << 0);
    }
    return s;
}
static int f418(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 63);
        if (s % 98 == 0) s += (k << 3);
    }
    return s;
}
static int f419(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 92);
        if (s % 38 == 0) s += (k << 2);
    }
    return s;
}
static int f420(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 15);
        if (s % 62 == 0) s += (k << 3);
    }
    return s;
}
static int f421(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 46) ^ (y + 97);
        if (s % 95 == 0) s += (k << 4);
    }
    return s;
}
static int f422(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 26) ^ (y + 44);
        if (s % 49 == 0) s += (k << 5);
    }
    return s;
}
static int f423(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 38);
        if (s % 64 == 0) s += (k << 5);
    }
    return s;
}
static int f424(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 90);
        if (s % 99 == 0) s += (k << 6);
    }
    return s;
}
static int f425(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 74);
        if (s % 15 == 0) s += (k << 5);
    }
    return s;
}
static int f426(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 38) ^ (y + 53);
        if (s % 44 == 0) s += (k << 3);
    }
    return s;
}
static int f427(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 9) ^ (y + 67);
        if (s % 56 == 0) s += (k << 2);
    }
    return s;
}
static int f428(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 7) ^ (y + 29);
        if (s % 54 == 0) s += (k << 0);
    }
    return s;
}
static int f429(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 31) ^ (y + 35);
        if (s % 86 == 0) s += (k << 3);
    }
    return s;
}
static int f430(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 10);
        if (s % 19 == 0) s += (k << 2);
    }
    return s;
}
static int f431(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 35) ^ (y + 13);
        if (s % 71 == 0) s += (k << 0);
    }
    return s;
}
static int f432(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 56);
        if (s % 24 == 0) s += (k << 6);
    }
    return s;
}
static int f433(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 50);
        if (s % 32 == 0) s += (k << 0);
    }
    return s;
}
static int f434(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 58);
        if (s % 46 == 0) s += (k << 5);
    }
    return s;
}
static int f435(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 17) ^ (y + 11);
        if (s % 1 == 0) s += (k << 3);
    }
    return s;
}
static int f436(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 99) ^ (y + 19);
        if (s % 47 == 0) s += (k << 1);
    }
    return s;
}
static int f437(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 3);
        if (s % 33 == 0) s += (k << 3);
    }
    return s;
}
static int f438(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 72) ^ (y + 59);
        if (s % 50 == 0) s += (k << 2);
    }
    return s;
}
static int f439(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 11);
        if (s % 7 == 0) s += (k << 4);
    }
    return s;
}
static int f440(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 28) ^ (y + 25);
        if (s % 57 == 0) s += (k << 0);
    }
    return s;
}
static int f441(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 2) ^ (y + 61);
        if (s % 67 == 0) s += (k << 2);
    }
    return s;
}
static int f442(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 11) ^ (y + 36);
        if (s % 77 == 0) s += (k << 4);
    }
    return s;
}
static int f443(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 61);
        if (s % 66 == 0) s += (k << 4);
    }
    return s;
}
static int f444(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 3) ^ (y + 7);
        if (s % 21 == 0) s += (k << 3);
    }
    return s;
}
static int f445(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 99);
        if (s % 65 == 0) s += (k << 2);
    }
    return s;
}
static int f446(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 56) ^ (y + 76);
        if (s % 85 == 0) s += (k << 0);
    }
    return s;
}
static int f447(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 80);
        if (s % 82 == 0) s += (k << 6);
    }
    return s;
}
static int f448(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 76) ^ (y + 5);
        if (s % 28 == 0) s += (k << 6);
    }
    return s;
}
static int f449(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 4) ^ (y + 54);
        if (s % 99 == 0) s += (k << 4);
    }
    return s;
}
static int f450(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 53);
        if (s % 56 == 0) s += (k << 2);
    }
    return s;
}
static int f451(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 49) ^ (y + 2);
        if (s % 97 == 0) s += (k << 0);
    }
    return s;
}
static int f452(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 44);
        if (s % 19 == 0) s += (k << 1);
    }
    return s;
}
static int f453(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 25);
        if (s % 55 == 0) s += (k << 4);
    }
    return s;
}
static int f454(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 10) ^ (y + 48);
        if (s % 28 == 0) s += (k << 3);
    }
    return s;
}
static int f455(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 54);
        if (s % 25 == 0) s += (k << 2);
    }
    return s;
}
static int f456(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 35) ^ (y + 18);
        if (s % 61 == 0) s += (k << 0);
    }
    return s;
}
static int f457(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 47) ^ (y + 37);
        if (s % 1 == 0) s += (k << 5);
    }
    return s;
}
static int f458(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 86) ^ (y + 82);
        if (s % 16 == 0) s += (k << 2);
    }
    return s;
}
static int f459(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 99) ^ (y + 22);
        if (s % 98 == 0) s += (k << 1);
    }
    return s;
}
static int f460(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 10);
        if (s % 10 == 0) s += (k << 3);
    }
    return s;
}
static int f461(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 49);
        if (s % 5 == 0) s += (k << 4);
    }
    return s;
}
static int f462(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 53) ^ (y + 20);
        if (s % 26 == 0) s += (k << 4);
    }
    return s;
}
static int f463(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 83) ^ (y + 3);
        if (s % 96 == 0) s += (k << 6);
    }
    return s;
}
static int f464(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 64) ^ (y + 41);
        if (s % 77 == 0) s += (k << 1);
    }
    return s;
}
static int f465(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 59) ^ (y + 18);
        if (s % 60 == 0) s += (k << 3);
    }
    return s;
}
static int f466(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 31) ^ (y + 10);
        if (s % 47 == 0) s += (k << 3);
    }
    return s;
}
static int f467(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 4);
        if (s % 2 == 0) s += (k << 3);
    }
    return s;
}
static int f468(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 24) ^ (y + 55);
        if (s % 11 == 0) s += (k << 3);
    }
    return s;
}
static int f469(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 35) ^ (y + 17);
        if (s % 97 == 0) s += (k << 0);
    }
    return s;
}
static int f470(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 48);
        if (s % 43 == 0) s += (k << 0);
    }
    return s;
}
static int f471(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 28) ^ (y + 20);
        if (s % 38 == 0) s += (k << 0);
    }
    return s;
}
static int f472(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 67) ^ (y + 90);
        if (s % 72 == 0) s += (k << 4);
    }
    return s;
}
static int f473(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 37);
        if (s % 15 == 0) s += (k << 5);
    }
    return s;
}
static int f474(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 83);
        if (s % 52 == 0) s += (k << 0);
    }
    return s;
}
static int f475(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 39);
        if (s % 48 == 0) s += (k << 6);
    }
    return s;
}
static int f476(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 71);
        if (s % 75 == 0) s += (k << 6);
    }
    return s;
}
static int f477(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 57) ^ (y + 31);
        if (s % 73 == 0) s += (k << 1);
    }
    return s;
}
static int f478(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 34);
        if (s % 3 == 0) s += (k << 4);
    }
    return s;
}
static int f479(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 70) ^ (y + 2);
        if (s % 94 == 0) s += (k << 0);
    }
    return s;
}
static int f480(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 18);
        if (s % 31 == 0) s += (k << 1);
    }
    return s;
}
static int f481(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 62) ^ (y + 86);
        if (s % 91 == 0) s += (k << 6);
    }
    return s;
}
static int f482(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 8) ^ (y + 2);
        if (s % 2 == 0) s += (k << 1);
    }
    return s;
}
static int f483(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 99) ^ (y + 28);
        if (s % 54 == 0) s += (k << 1);
    }
    return s;
}
static int f484(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 30) ^ (y + 65);
        if (s % 92 == 0) s += (k << 2);
    }
    return s;
}
static int f485(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 79) ^ (y + 31);
        if (s % 40 == 0) s += (k << 2);
    }
    return s;
}
static int f486(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 8) ^ (y + 65);
        if (s % 31 == 0) s += (k << 1);
    }
    return s;
}
static int f487(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 5) ^ (y + 89);
        if (s % 50 == 0) s += (k << 5);
    }
    return s;
}
static int f488(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 45) ^ (y + 3);
        if (s % 72 == 0) s += (k << 3);
    }
    return s;
}
static int f489(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 57);
        if (s % 58 == 0) s += (k << 4);
    }
    return s;
}
static int f490(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 14) ^ (y + 84);
        if (s % 16 == 0) s += (k << 0);
    }
    return s;
}
static int f491(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 48) ^ (y + 73);
        if (s % 68 == 0) s += (k << 6);
    }
    return s;
}
static int f492(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 36) ^ (y + 92);
        if (s % 75 == 0) s += (k << 1);
    }
    return s;
}
static int f493(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 77) ^ (y + 50);
        if (s % 49 == 0) s += (k << 0);
    }
    return s;
}
static int f494(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 22);
        if (s % 76 == 0) s += (k << 4);
    }
    return s;
}
static int f495(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 10);
        if (s % 83 == 0) s += (k << 4);
    }
    return s;
}
static int f496(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 58) ^ (y + 8);
        if (s % 95 == 0) s += (k << 2);
    }
    return s;
}
static int f497(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 28) ^ (y + 68);
        if (s % 80 == 0) s += (k << 0);
    }
    return s;
}
static int f498(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 50) ^ (y + 13);
        if (s % 66 == 0) s += (k << 1);
    }
    return s;
}
static int f499(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 71);
        if (s % 48 == 0) s += (k << 4);
    }
    return s;
}
static int f500(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 53) ^ (y + 18);
        if (s % 59 == 0) s += (k << 4);
    }
    return s;
}
static int f501(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 45) ^ (y + 9);
        if (s % 64 == 0) s += (k << 3);
    }
    return s;
}
static int f502(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 1) ^ (y + 73);
        if (s % 73 == 0) s += (k << 1);
    }
    return s;
}
static int f503(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 73);
        if (s % 59 == 0) s += (k << 6);
    }
    return s;
}
static int f504(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 6) ^ (y + 8);
        if (s % 95 == 0) s += (k << 6);
    }
    return s;
}
static int f505(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 15);
        if (s % 44 == 0) s += (k << 5);
    }
    return s;
}
static int f506(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 48);
        if (s % 44 == 0) s += (k << 5);
    }
    return s;
}
static int f507(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 36);
        if (s % 62 == 0) s += (k << 6);
    }
    return s;
}
static int f508(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 95);
        if (s % 16 == 0) s += (k << 5);
    }
    return s;
}
static int f509(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 33);
        if (s % 4 == 0) s += (k << 6);
    }
    return s;
}
static int f510(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 81) ^ (y + 33);
        if (s % 50 == 0) s += (k << 4);
    }
    return s;
}
static int f511(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 22) ^ (y + 81);
        if (s % 32 == 0) s += (k << 1);
    }
    return s;
}
static int f512(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 90) ^ (y + 34);
        if (s % 76 == 0) s += (k << 6);
    }
    return s;
}
static int f513(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 57) ^ (y + 23);
        if (s % 77 == 0) s += (k << 1);
    }
    return s;
}
static int f514(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 73);
        if (s % 7 == 0) s += (k << 4);
    }
    return s;
}
static int f515(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 95) ^ (y + 46);
        if (s % 72 == 0) s += (k << 4);
    }
    return s;
}
static int f516(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 16) ^ (y + 2);
        if (s % 59 == 0) s += (k << 2);
    }
    return s;
}
static int f517(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 6) ^ (y + 89);
        if (s % 79 == 0) s += (k << 6);
    }
    return s;
}
static int f518(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 64) ^ (y + 87);
        if (s % 84 == 0) s += (k << 1);
    }
    return s;
}
static int f519(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 6) ^ (y + 4);
        if (s % 76 == 0) s += (k << 6);
    }
    return s;
}
static int f520(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 53) ^ (y + 16);
        if (s % 53 == 0) s += (k << 4);
    }
    return s;
}
static int f521(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 68);
        if (s % 79 == 0) s += (k << 2);
    }
    return s;
}
static int f522(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 57) ^ (y + 79);
        if (s % 74 == 0) s += (k << 1);
    }
    return s;
}
static int f523(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 29) ^ (y + 69);
        if (s % 90 == 0) s += (k << 1);
    }
    return s;
}
static int f524(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 15) ^ (y + 91);
        if (s % 9 == 0) s += (k << 1);
    }
    return s;
}
static int f525(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 88);
        if (s % 76 == 0) s += (k << 2);
    }
    return s;
}
static int f526(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 12) ^ (y + 6);
        if (s % 9 == 0) s += (k << 5);
    }
    return s;
}
static int f527(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 92) ^ (y + 59);
        if (s % 39 == 0) s += (k << 1);
    }
    return s;
}
static int f528(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 84) ^ (y + 68);
        if (s % 70 == 0) s += (k << 0);
    }
    return s;
}
static int f529(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 93) ^ (y + 9);
        if (s % 83 == 0) s += (k << 2);
    }
    return s;
}
static int f530(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 35);
        if (s % 16 == 0) s += (k << 4);
    }
    return s;
}
static int f531(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 52) ^ (y + 97);
        if (s % 40 == 0) s += (k << 3);
    }
    return s;
}
static int f532(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 59);
        if (s % 39 == 0) s += (k << 6);
    }
    return s;
}
static int f533(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 39) ^ (y + 1);
        if (s % 98 == 0) s += (k << 4);
    }
    return s;
}
static int f534(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 42) ^ (y + 67);
        if (s % 85 == 0) s += (k << 0);
    }
    return s;
}
static int f535(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 64) ^ (y + 60);
        if (s % 49 == 0) s += (k << 1);
    }
    return s;
}
static int f536(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 20) ^ (y + 84);
        if (s % 28 == 0) s += (k << 6);
    }
    return s;
}
static int f537(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 34) ^ (y + 41);
        if (s % 79 == 0) s += (k << 6);
    }
    return s;
}
static int f538(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 27) ^ (y + 59);
        if (s % 12 == 0) s += (k << 6);
    }
    return s;
}
static int f539(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 20) ^ (y + 46);
        if (s % 11 == 0) s += (k << 6);
    }
    return s;
}
static int f540(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 82) ^ (y + 55);
        if (s % 57 == 0) s += (k << 5);
    }
    return s;
}
static int f541(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 80) ^ (y + 67);
        if (s % 84 == 0) s += (k << 3);
    }
    return s;
}
static int f542(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 51) ^ (y + 23);
        if (s % 26 == 0) s += (k << 2);
    }
    return s;
}
static int f543(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 18) ^ (y + 63);
        if (s % 22 == 0) s += (k << 4);
    }
    return s;
}
static int f544(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 88) ^ (y + 65);
        if (s % 58 == 0) s += (k << 4);
    }
    return s;
}
static int f545(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 74) ^ (y + 45);
        if (s % 3 == 0) s += (k << 4);
    }
    return s;
}
static int f546(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 19) ^ (y + 56);
        if (s % 35 == 0) s += (k << 5);
    }
    return s;
}
static int f547(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 73) ^ (y + 64);
        if (s % 65 == 0) s += (k << 3);
    }
    return s;
}
static int f548(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 69) ^ (y + 28);
        if (s % 72 == 0) s += (k << 6);
    }
    return s;
}
static int f549(int x, int y) {
    int s = 0;
    for (int k = 0; k < x; k++) {
        s += (k * 31) ^ (y + 85);
        if (s % 22 == 0) s += (k << 3);
    }
    return s;
}
int main(int argc, char **argv) { int t = 0;
  t += f0(argc, 0);
  t += f1(argc, 1);
  t += f2(argc, 2);
  t += f3(argc, 3);
  t += f4(argc, 4);
  t += f5(argc, 5);
  t += f6(argc, 6);
  t += f7(argc, 7);
  t += f8(argc, 8);
  t += f9(argc, 9);
  t += f10(argc, 10);
  t += f11(argc, 11);
  t += f12(argc, 12);
  t += f13(argc, 13);
  t += f14(argc, 14);
  t += f15(argc, 15);
  t += f16(argc, 16);
  t += f17(argc, 17);
  t += f18(argc, 18);
  t += f19(argc, 19);
  t += f20(argc, 20);
  t += f21(argc, 21);
  t += f22(argc, 22);
  t += f23(argc, 23);
  t += f24(argc, 24);
  t += f25(argc, 25);
  t += f26(argc, 26);
  t += f27(argc, 27);
  t += f28(argc, 28);
  t += f29(argc, 29);
  t += f30(argc, 30);
  t += f31(argc, 31);
  t += f32(argc, 32);
  t += f33(argc, 33);
  t += f34(argc, 34);
  t += f35(argc, 35);
  t += f36(argc, 36);
  t += f37(argc, 37);
  t += f38(argc, 38);
  t += f39(argc, 39);
  t += f40(argc, 40);
  t += f41(argc, 41);
  t += f42(argc, 42);
  t += f43(argc, 43);
  t += f44(argc, 44);
  t += f45(argc, 45);
  t += f46(argc, 46);
  t += f47(argc, 47);
  t += f48(argc, 48);
  t += f49(argc, 49);
  t += f50(argc, 50);
  t += f51(argc, 51);
  t += f52(argc, 52);
  t += f53(argc, 53);
  t += f54(argc, 54);
  t += f55(argc, 55);
  t += f56(argc, 56);
  t += f57(argc, 57);
  t += f58(argc, 58);
  t += f59(argc, 59);
  t += f60(argc, 60);
  t += f61(argc, 61);
  t += f62(argc, 62);
  t += f63(argc, 63);
  t += f64(argc, 64);
  t += f65(argc, 65);
  t += f66(argc, 66);
  t += f67(argc, 67);
  t += f68(argc, 68);
  t += f69(argc, 69);
  t += f70(argc, 70);
  t += f71(argc, 71);
  t += f72(argc, 72);
  t += f73(argc, 73);
  t += f74(argc, 74);
  t += f75(argc, 75);
  t += f76(argc, 76);
  t += f77(argc, 77);
  t += f78(argc, 78);
  t += f79(argc, 79);
  t += f80(argc, 80);
  t += f81(argc, 81);
  t += f82(argc, 82);
  t += f83(argc, 83);
  t += f84(argc, 84);
  t += f85(argc, 85);
  t += f86(argc, 86);
  t += f87(argc, 87);
  t += f88(argc, 88);
  t += f89(argc, 89);
  t += f90(argc, 90);
  t += f91(argc, 91);
  t += f92(argc, 92);
  t += f93(argc, 93);
  t += f94(argc, 94);
  t += f95(argc, 95);
  t += f96(argc, 96);
  t += f97(argc, 97);
  t += f98(argc, 98);
  t += f99(argc, 99);
  t += f100(argc, 100);
  t += f101(argc, 101);
  t += f102(argc, 102);
  t += f103(argc, 103);
  t += f104(argc, 104);
  t += f105(argc, 105);
  t += f106(argc, 106);
  t += f107(argc, 107);
  t += f108(argc, 108);
  t += f109(argc, 109);
  t += f110(argc, 110);
  t += f111(argc, 111);
  t += f112(argc, 112);
  t += f113(argc, 113);
  t += f114(argc, 114);
  t += f115(argc, 115);
  t += f116(argc, 116);
  t += f117(argc, 117);
  t += f118(argc, 118);
  t += f119(argc, 119);
  t += f120(argc, 120);
  t += f121(argc, 121);
  t += f122(argc, 122);
  t += f123(argc, 123);
  t += f124(argc, 124);
  t += f125(argc, 125);
  t += f126(argc, 126);
  t += f127(argc, 127);
  t += f128(argc, 128);
  t += f129(argc, 129);
  t += f130(argc, 130);
  t += f131(argc, 131);
  t += f132(argc, 132);
  t += f133(argc, 133);
  t += f134(argc, 134);
  t += f135(argc, 135);
  t += f136(argc, 136);
  t += f137(argc, 137);
  t += f138(argc, 138);
  t += f139(argc, 139);
  t += f140(argc, 140);
  t += f141(argc, 141);
  t += f142(argc, 142);
  t += f143(argc, 143);
  t += f144(argc, 144);
  t += f145(argc, 145);
  t += f146(argc, 146);
  t += f147(argc, 147);
  t += f148(argc, 148);
  t += f149(argc, 149);
  t += f150(argc, 150);
  t += f151(argc, 151);
  t += f152(argc, 152);
  t += f153(argc, 153);
  t += f154(argc, 154);
  t += f155(argc, 155);
  t += f156(argc, 156);
  t += f157(argc, 157);
  t += f158(argc, 158);
  t += f159(argc, 159);
  t += f160(argc, 160);
  t += f161(argc, 161);
  t += f162(argc, 162);
  t += f163(argc, 163);
  t += f164(argc, 164);
  t += f165(argc, 165);
  t += f166(argc, 166);
  t += f167(argc, 167);
  t += f168(argc, 168);
  t += f169(argc, 169);
  t += f170(argc, 170);
  t += f171(argc, 171);
  t += f172(argc, 172);
  t += f173(argc, 173);
  t += f174(argc, 174);
  t += f175(argc, 175);
  t += f176(argc, 176);
  t += f177(argc, 177);
  t += f178(argc, 178);
  t += f179(argc, 179);
  t += f180(argc, 180);
  t += f181(argc, 181);
  t += f182(argc, 182);
  t += f183(argc, 183);
  t += f184(argc, 184);
  t += f185(argc, 185);
  t += f186(argc, 186);
  t += f187(argc, 187);
  t += f188(argc, 188);
  t += f189(argc, 189);
  t += f190(argc, 190);
  t += f191(argc, 191);
  t += f192(argc, 192);
  t += f193(argc, 193);
  t += f194(argc, 194);
  t += f195(argc, 195);
  t += f196(argc, 196);
  t += f197(argc, 197);
  t += f198(argc, 198);
  t += f199(argc, 199);
  t += f200(argc, 200);
  t += f201(argc, 201);
  t += f202(argc, 202);
  t += f203(argc, 203);
  t += f204(argc, 204);
  t += f205(argc, 205);
  t += f206(argc, 206);
  t += f207(argc, 207);
  t += f208(argc, 208);
  t += f209(argc, 209);
  t += f210(argc, 210);
  t += f211(argc, 211);
  t += f212(argc, 212);
  t += f213(argc, 213);
  t += f214(argc, 214);
  t += f215(argc, 215);
  t += f216(argc, 216);
  t += f217(argc, 217);
  t += f218(argc, 218);
  t += f219(argc, 219);
  t += f220(argc, 220);
  t += f221(argc, 221);
  t += f222(argc, 222);
  t += f223(argc, 223);
  t += f224(argc, 224);
  t += f225(argc, 225);
  t += f226(argc, 226);
  t += f227(argc, 227);
  t += f228(argc, 228);
  t += f229(argc, 229);
  t += f230(argc, 230);
  t += f231(argc, 231);
  t += f232(argc, 232);
  t += f233(argc, 233);
  t += f234(argc, 234);
  t += f235(argc, 235);
  t += f236(argc, 236);
  t += f237(argc, 237);
  t += f238(argc, 238);
  t += f239(argc, 239);
  t += f240(argc, 240);
  t += f241(argc, 241);
  t += f242(argc, 242);
  t += f243(argc, 243);
  t += f244(argc, 244);
  t += f245(argc, 245);
  t += f246(argc, 246);
  t += f247(argc, 247);
  t += f248(argc, 248);
  t += f249(argc, 249);
  t += f250(argc, 250);
  t += f251(argc, 251);
  t += f252(argc, 252);
  t += f253(argc, 253);
  t += f254(argc, 254);
  t += f255(argc, 255);
  t += f256(argc, 256);
  t += f257(argc, 257);
  t += f258(argc, 258);
  t += f259(argc, 259);
  t += f260(argc, 260);
  t += f261(argc, 261);
  t += f262(argc, 262);
  t += f263(argc, 263);
  t += f264(argc, 264);
  t += f265(argc, 265);
  t += f266(argc, 266);
  t += f267(argc, 267);
  t += f268(argc, 268);
  t += f269(argc, 269);
  t += f270(argc, 270);
  t += f271(argc, 271);
  t += f272(argc, 272);
  t += f273(argc, 273);
  t += f274(argc, 274);
  t += f275(argc, 275);
  t += f276(argc, 276);
  t += f277(argc, 277);
  t += f278(argc, 278);
  t += f279(argc, 279);
  t += f280(argc, 280);
  t += f281(argc, 281);
  t += f282(argc, 282);
  t += f283(argc, 283);
  t += f284(argc, 284);
  t += f285(argc, 285);
  t += f286(argc, 286);
  t += f287(argc, 287);
  t += f288(argc, 288);
  t += f289(argc, 289);
  t += f290(argc, 290);
  t += f291(argc, 291);
  t += f292(argc, 292);
  t += f293(argc, 293);
  t += f294(argc, 294);
  t += f295(argc, 295);
  t += f296(argc, 296);
  t += f297(argc, 297);
  t += f298(argc, 298);
  t += f299(argc, 299);
  t += f300(argc, 300);
  t += f301(argc, 301);
  t += f302(argc, 302);
  t += f303(argc, 303);
  t += f304(argc, 304);
  t += f305(argc, 305);
  t += f306(argc, 306);
  t += f307(argc, 307);
  t += f308(argc, 308);
  t += f309(argc, 309);
  t += f310(argc, 310);
  t += f311(argc, 311);
  t += f312(argc, 312);
  t += f313(argc, 313);
  t += f314(argc, 314);
  t += f315(argc, 315);
  t += f316(argc, 316);
  t += f317(argc, 317);
  t += f318(argc, 318);
  t += f319(argc, 319);
  t += f320(argc, 320);
  t += f321(argc, 321);
  t += f322(argc, 322);
  t += f323(argc, 323);
  t += f324(argc, 324);
  t += f325(argc, 325);
  t += f326(argc, 326);
  t += f327(argc, 327);
  t += f328(argc, 328);
  t += f329(argc, 329);
  t += f330(argc, 330);
  t += f331(argc, 331);
  t += f332(argc, 332);
  t += f333(argc, 333);
  t += f334(argc, 334);
  t += f335(argc, 335);
  t += f336(argc, 336);
  t += f337(argc, 337);
  t += f338(argc, 338);
  t += f339(argc, 339);
  t += f340(argc, 340);
  t += f341(argc, 341);
  t += f342(argc, 342);
  t += f343(argc, 343);
  t += f344(argc, 344);
  t += f345(argc, 345);
  t += f346(argc, 346);
  t += f347(argc, 347);
  t += f348(argc, 348);
  t += f349(argc, 349);
  t += f350(argc, 350);
  t += f351(argc, 351);
  t += f352(argc, 352);
  t += f353(argc, 353);
  t += f354(argc, 354);
  t += f355(argc, 355);
  t += f356(argc, 356);
  t += f357(argc, 357);
  t += f358(argc, 358);
  t += f359(argc, 359);
  t += f360(argc, 360);
  t += f361(argc, 361);
  t += f362(argc, 362);
  t += f363(argc, 363);
  t += f364(argc, 364);
  t += f365(argc, 365);
  t += f366(argc, 366);
  t += f367(argc, 367);
  t += f368(argc, 368);
  t += f369(argc, 369);
  t += f370(argc, 370);
  t += f371(argc, 371);
  t += f372(argc, 372);
  t += f373(argc, 373);
  t += f374(argc, 374);
  t += f375(argc, 375);
  t += f376(argc, 376);
  t += f377(argc, 377);
  t += f378(argc, 378);
  t += f379(argc, 379);
  t += f380(argc, 380);
  t += f381(argc, 381);
  t += f382(argc, 382);
  t += f383(argc, 383);
  t += f384(argc, 384);
  t += f385(argc, 385);
  t += f386(argc, 386);
  t += f387(argc, 387);
  t += f388(argc, 388);
  t += f389(argc, 389);
  t += f390(argc, 390);
  t += f391(argc, 391);
  t += f392(argc, 392);
  t += f393(argc, 393);
  t += f394(argc, 394);
  t += f395(argc, 395);
  t += f396(argc, 396);
  t += f397(argc, 397);
  t += f398(argc, 398);
  t += f399(argc, 399);
  t += f400(argc, 400);
  t += f401(argc, 401);
  t += f402(argc, 402);
  t += f403(argc, 403);
  t += f404(argc, 404);
  t += f405(argc, 405);
  t += f406(argc, 406);
  t += f407(argc, 407);
  t += f408(argc, 408);
  t += f409(argc, 409);
  t += f410(argc, 410);
  t += f411(argc, 411);
  t += f412(argc, 412);
  t += f413(argc, 413);
  t += f414(argc, 414);
  t += f415(argc, 415);
  t += f416(argc, 416);
  t += f417(argc, 417);
  t += f418(argc, 418);
  t += f419(argc, 419);
  t += f420(argc, 420);
  t += f421(argc, 421);
  t += f422(argc, 422);
  t += f423(argc, 423);
  t += f424(argc, 424);
  t += f425(argc, 425);
  t += f426(argc, 426);
  t += f427(argc, 427);
  t += f428(argc, 428);
  t += f429(argc, 429);
  t += f430(argc, 430);
  t += f431(argc, 431);
  t += f432(argc, 432);
  t += f433(argc, 433);
  t += f434(argc, 434);
  t += f435(argc, 435);
  t += f436(argc, 436);
  t += f437(argc, 437);
  t += f438(argc, 438);
  t += f439(argc, 439);
  t += f440(argc, 440);
  t += f441(argc, 441);
  t += f442(argc, 442);
  t += f443(argc, 443);
  t += f444(argc, 444);
  t += f445(argc, 445);
  t += f446(argc, 446);
  t += f447(argc, 447);
  t += f448(argc, 448);
  t += f449(argc, 449);
  t += f450(argc, 450);
  t += f451(argc, 451);
  t += f452(argc, 452);
  t += f453(argc, 453);
  t += f454(argc, 454);
  t += f455(argc, 455);
  t += f456(argc, 456);
  t += f457(argc, 457);
  t += f458(argc, 458);
  t += f459(argc, 459);
  t += f460(argc, 460);
  t += f461(argc, 461);
  t += f462(argc, 462);
  t += f463(argc, 463);
  t += f464(argc, 464);
  t += f465(argc, 465);
  t += f466(argc, 466);
  t += f467(argc, 467);
  t += f468(argc, 468);
  t += f469(argc, 469);
  t += f470(argc, 470);
  t += f471(argc, 471);
  t += f472(argc, 472);
  t += f473(argc, 473);
  t += f474(argc, 474);
  t += f475(argc, 475);
  t += f476(argc, 476);
  t += f477(argc, 477);
  t += f478(argc, 478);
  t += f479(argc, 479);
  t += f480(argc, 480);
  t += f481(argc, 481);
  t += f482(argc, 482);
  t += f483(argc, 483);
  t += f484(argc, 484);
  t += f485(argc, 485);
  t += f486(argc, 486);
  t += f487(argc, 487);
  t += f488(argc, 488);
  t += f489(argc, 489);
  t += f490(argc, 490);
  t += f491(argc, 491);
  t += f492(argc, 492);
  t += f493(argc, 493);
  t += f494(argc, 494);
  t += f495(argc, 495);
  t += f496(argc, 496);
  t += f497(argc, 497);
  t += f498(argc, 498);
  t += f499(argc, 499);
  t += f500(argc, 500);
  t += f501(argc, 501);
  t += f502(argc, 502);
  t += f503(argc, 503);
  t += f504(argc, 504);
  t += f505(argc, 505);
  t += f506(argc, 506);
  t += f507(argc, 507);
  t += f508(argc, 508);
  t += f509(argc, 509);
  t += f510(argc, 510);
  t += f511(argc, 511);
  t += f512(argc, 512);
  t += f513(argc, 513);
  t += f514(argc, 514);
  t += f515(argc, 515);
  t += f516(argc, 516);
  t += f517(argc, 517);
  t += f518(argc, 518);
  t += f519(argc, 519);
  t += f520(argc, 520);
  t += f521(argc, 521);
  t += f522(argc, 522);
  t += f523(argc, 523);
  t += f524(argc, 524);
  t += f525(argc, 525);
  t += f526(argc, 526);
  t += f527(argc, 527);
  t += f528(argc, 528);
  t += f529(argc, 529);
  t += f530(argc, 530);
  t += f531(argc, 531);
  t += f532(argc, 532);
  t += f533(argc, 533);
  t += f534(argc, 534);
  t += f535(argc, 535);
  t += f536(argc, 536);
  t += f537(argc, 537);
  t += f538(argc, 538);
  t += f539(argc, 539);
  t += f540(argc, 540);
  t += f541(argc, 541);
  t += f542(argc, 542);
  t += f543(argc, 543);
  t += f544(argc, 544);
  t += f545(argc, 545);
  t += f546(argc, 546);
  t += f547(argc, 547);
  t += f548(argc, 548);
  t += f549(argc, 549);
  return t & 1; }
