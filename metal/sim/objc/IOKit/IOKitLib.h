/* Stand-in for the SDK header in the Objective-C syntax check; see ../MetalDecls.h. */
#include "../MetalDecls.h"
