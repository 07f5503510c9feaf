#pragma once
// Note [Alpha]: the one definition of Alpha.
// Uses Alpha (Note [Alpha]) and a Note nobody wrote (Note [Missing]).
