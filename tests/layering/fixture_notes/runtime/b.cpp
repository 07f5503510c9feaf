// Note [Alpha]. Defined a second time: a violation.
// Note [Beta] (a.h) is a citation of a Note defined nowhere: a violation.
int b() { return 0; }
