/* MetalDecls.h - declarations of exactly the Foundation, Metal, IOKit and
 * CoreFoundation API that metal/metal_backend.m uses, transcribed from
 * Apple's documentation and SDK headers (signatures, types, enum values), so
 * that the Objective-C host code can be syntax- and type-checked with clang
 * on machines without the macOS SDK:
 *
 *   clang -fsyntax-only -x objective-c -fobjc-arc -fobjc-runtime=macosx-13.0 \
 *         -Imetal/sim/objc ... metal/metal_backend.m
 *
 * <Metal/Metal.h>, <Foundation/Foundation.h> and <IOKit/IOKitLib.h> in this
 * folder include this file. Never used for a real build. Anything the .m
 * starts using must be added here first, with the same signature as Apple's.
 */
#ifndef MD_METAL_DECLS_H
#define MD_METAL_DECLS_H

#include <stddef.h>
#include <stdint.h>

/* ---- Objective-C / Foundation basics ------------------------------------------ */
#pragma clang assume_nonnull begin /* NS_ASSUME_NONNULL_BEGIN, as Apple's headers */
typedef signed char BOOL;
#define nil ((id)0)
#define YES ((BOOL)1)
#define NO ((BOOL)0)
typedef long NSInteger;
typedef unsigned long NSUInteger;
typedef double CFTimeInterval;
typedef NSUInteger NSStringEncoding;
#define NSUTF8StringEncoding ((NSStringEncoding)4)

typedef struct _NSRange {
    NSUInteger location;
    NSUInteger length;
} NSRange;
static inline NSRange NSMakeRange(NSUInteger loc, NSUInteger len)
{
    NSRange r = {loc, len};
    return r;
}

typedef struct {
    NSInteger majorVersion;
    NSInteger minorVersion;
    NSInteger patchVersion;
} NSOperatingSystemVersion;

@protocol NSObject
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
+ (instancetype)new;
- (instancetype)init;
@end

@interface NSString : NSObject
+ (nullable instancetype)stringWithUTF8String:(const char *)nullTerminatedCString;
- (nullable instancetype)initWithBytes:(const void *)bytes length:(NSUInteger)len encoding:(NSStringEncoding)encoding;
@property (nullable, readonly) const char *UTF8String;
@end

@interface NSError : NSObject
@property (readonly) NSInteger code;
@property (readonly, copy) NSString *localizedDescription;
@end

typedef struct {
    unsigned long state;
    __unsafe_unretained id _Nullable *_Nullable itemsPtr;
    unsigned long *_Nullable mutationsPtr;
    unsigned long extra[5];
} NSFastEnumerationState;

@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState *)state
                                  objects:(__unsafe_unretained id _Nullable[_Nonnull])buffer
                                    count:(NSUInteger)len;
@end

@interface NSArray<__covariant ObjectType> : NSObject <NSFastEnumeration>
@property (readonly) NSUInteger count;
- (ObjectType)objectAtIndex:(NSUInteger)index;
@end

@interface NSMutableArray<ObjectType> : NSArray<ObjectType>
+ (instancetype)array;
- (void)insertObject:(ObjectType)anObject atIndex:(NSUInteger)index;
- (void)removeObjectAtIndex:(NSUInteger)index;
- (void)addObject:(ObjectType)anObject;
@end

@interface NSMutableDictionary<KeyType, ObjectType> : NSObject
+ (instancetype)dictionary;
- (nullable ObjectType)objectForKey:(KeyType)aKey;
- (void)setObject:(ObjectType)anObject forKey:(KeyType)aKey;
@property (readonly) NSUInteger count;
@end

@interface NSProcessInfo : NSObject
@property (class, readonly, strong) NSProcessInfo *processInfo;
@property (readonly) NSOperatingSystemVersion operatingSystemVersion;
@property (readonly) unsigned long long physicalMemory;
@end

/* ---- Metal -------------------------------------------------------------------------- */
typedef struct {
    NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth)
{
    MTLSize s = {width, height, depth};
    return s;
}

typedef NSUInteger MTLResourceOptions;
enum {
    MTLResourceCPUCacheModeDefaultCache = 0,
    MTLResourceStorageModeShared = 0UL << 4,
    MTLResourceHazardTrackingModeDefault = 0UL << 8,
};

typedef NSInteger MTLGPUFamily;
enum {
    MTLGPUFamilyApple1 = 1001,
    MTLGPUFamilyApple7 = 1007,
    MTLGPUFamilyApple8 = 1008,
    MTLGPUFamilyApple9 = 1009,
    MTLGPUFamilyMac2 = 2002,
    MTLGPUFamilyMetal3 = 5001,
};

typedef NSUInteger MTLCommandBufferStatus;
enum {
    MTLCommandBufferStatusNotEnqueued = 0,
    MTLCommandBufferStatusEnqueued = 1,
    MTLCommandBufferStatusCommitted = 2,
    MTLCommandBufferStatusScheduled = 3,
    MTLCommandBufferStatusCompleted = 4,
    MTLCommandBufferStatusError = 5,
};

typedef NSUInteger MTLCommandBufferError;
enum {
    MTLCommandBufferErrorNone = 0,
    MTLCommandBufferErrorInternal = 1,
    MTLCommandBufferErrorTimeout = 2,
    MTLCommandBufferErrorPageFault = 3,
    MTLCommandBufferErrorNotPermitted = 7,
    MTLCommandBufferErrorOutOfMemory = 8,
    MTLCommandBufferErrorInvalidResource = 9,
};

@interface MTLCompileOptions : NSObject
@property (readwrite, nonatomic) BOOL fastMathEnabled
    __attribute__((deprecated("Use mathMode instead")));
@end

@protocol MTLFunction <NSObject>
@end

@protocol MTLLibrary <NSObject>
- (nullable id<MTLFunction>)newFunctionWithName:(NSString *)functionName;
@property (readonly) NSArray<NSString *> *functionNames;
@end

@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end

@protocol MTLBuffer <NSObject>
- (void *)contents;
@property (readonly) NSUInteger length;
@end

@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
@end

@protocol MTLCommandBuffer <NSObject>
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (void)commit;
- (void)waitUntilCompleted;
@property (readonly) MTLCommandBufferStatus status;
@property (nullable, readonly) NSError *error;
@property (readonly) CFTimeInterval GPUEndTime;
@end

@protocol MTLCommandQueue <NSObject>
- (nullable id<MTLCommandBuffer>)commandBuffer;
@end

@protocol MTLDevice <NSObject>
@property (readonly) NSString *name;
@property (readonly) BOOL hasUnifiedMemory;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
@property (readonly) NSUInteger currentAllocatedSize;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (nullable id<MTLCommandQueue>)newCommandQueue;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString *)source
                                        options:(nullable MTLCompileOptions *)options
                                          error:(__autoreleasing NSError *_Nullable *_Nullable)error;
- (nullable id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                                      error:(__autoreleasing NSError *_Nullable *_Nullable)error;
@end

id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void);

/* ---- CoreFoundation and IOKit (GPU core count from the IORegistry) ------------------- */
typedef const void *CFTypeRef;
typedef const struct __CFString *CFStringRef;
typedef const struct __CFDictionary *CFDictionaryRef;
typedef struct __CFDictionary *CFMutableDictionaryRef;
typedef const struct __CFAllocator *CFAllocatorRef;
typedef const struct __CFNumber *CFNumberRef;
typedef unsigned long CFTypeID;
typedef long CFIndex;
typedef unsigned char Boolean;
typedef CFIndex CFNumberType;
enum { kCFNumberSInt32Type = 3 };
extern const CFAllocatorRef kCFAllocatorDefault;
CFTypeID CFGetTypeID(CFTypeRef cf);
CFTypeID CFNumberGetTypeID(void);
Boolean CFNumberGetValue(CFNumberRef number, CFNumberType theType, void *valuePtr);
void CFRelease(CFTypeRef cf);
#define CFSTR(cStr) ((CFStringRef)__builtin___CFStringMakeConstantString("" cStr ""))

typedef unsigned int mach_port_t;
typedef int kern_return_t;
typedef mach_port_t io_object_t;
typedef io_object_t io_service_t;
typedef io_object_t io_registry_entry_t;
typedef uint32_t IOOptionBits;
#define MACH_PORT_NULL ((mach_port_t)0)
CFMutableDictionaryRef IOServiceMatching(const char *name);
io_service_t IOServiceGetMatchingService(mach_port_t mainPort, CFDictionaryRef matching);
CFTypeRef IORegistryEntryCreateCFProperty(io_registry_entry_t entry, CFStringRef key, CFAllocatorRef allocator,
                                          IOOptionBits options);
kern_return_t IOObjectRelease(io_object_t object);

#pragma clang assume_nonnull end

#endif
